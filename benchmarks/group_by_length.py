"""`train.group_by_length` against random batches: the spec's teacher fine-tuned on its task with
each, for several data orders, in one run: dev accuracy and training seconds.

    GLUE_DIR=... .venv/bin/python benchmarks/group_by_length.py sweeps/quickstart.yaml \\
        --workdir /tmp/gbl --seeds 0 1 2

The teacher stage's own recipe (`pipeline.training.teacher.finetune_teacher`: the `finetune`
method on every layer of the pretrained checkpoint, `teacher.finetune` settings) with the seed
of its batch order, dropout and classifier head varied (the stage fixes all three at TEACHER_SEED). Nothing is cached:
every run trains. Run it idle; the runs alternate (seed 0 plain, seed 0 grouped, ...), so a
machine that changes speed does so for both.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from methods import get_method
from pipeline.config import load_spec
from pipeline.prepare.stage import prepare
from pipeline.training import loop
from pipeline.training.context import method_context
from pipeline.training.teacher import teacher_train_config


def finetune(spec, prepared, seed: int, grouped: bool) -> tuple[float, float, float]:
    """(final accuracy, best accuracy, training seconds) of one teacher fine-tune."""
    train = teacher_train_config(spec).model_copy(update={"group_by_length": grouped, "progress_bar": False})
    ctx = method_context(spec, prepared, None, learning_rate=train.learning_rate)
    # the classifier head is drawn as the checkpoint loads, from the global generator: seeded here
    # with the run's seed, as the stage seeds it with TEACHER_SEED
    torch.manual_seed(seed)
    pretrained = ctx.load_pretrained()
    ctx.load_pretrained = lambda: pretrained
    method = get_method("finetune")({"init_from": "pretrained", "num_layers": pretrained.config.num_hidden_layers}, ctx)
    result = loop.run(method, train_set=prepared.data.train, dev=prepared.data.dev, task=prepared.data.task, train=train,
                      seed=seed, pad_id=prepared.pad_id)
    key = f"eval/{prepared.data.task.primary_metric}"
    final = result.final_metrics[key]
    return final, result.best_metrics[key], result.train_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/drydock-group-by-length"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    spec = load_spec(args.spec)
    prepared = prepare(spec, args.workdir)
    rows: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for seed in args.seeds:
        for grouped in (False, True):
            rows[grouped].append(finetune(spec, prepared, seed, grouped))
            final, best, seconds = rows[grouped][-1]
            print(f"seed {seed} {'grouped' if grouped else 'random '}: final {final:.4f}, best {best:.4f}, {seconds:.1f} s", flush=True)
    for grouped, runs in rows.items():
        finals, seconds = [r[0] for r in runs], [r[2] for r in runs]
        print(f"{'grouped by length' if grouped else 'random batches'}: final accuracy median {statistics.median(finals):.4f} "
              f"(min {min(finals):.4f}, max {max(finals):.4f}), training median {statistics.median(seconds):.1f} s")


if __name__ == "__main__":
    main()
