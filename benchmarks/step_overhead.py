"""Time per training step of drydock's loop against a plain PyTorch loop, same model and batches.

    .venv/bin/python benchmarks/step_overhead.py [--steps 40] [--repeats 3]

Model: a MiniLM-sized BERT (6 layers, hidden 384, 12 heads) built from a config, batch 32,
sequence length 64, AdamW + linear schedule + gradient clipping in both loops. A step is the time
between two consecutive optimizer steps (data, schedules, forward, backward, clip, step), so the
evaluation at the end of drydock's run is not counted. The two loops alternate `--repeats` times
and the medians are compared, because this machine is noisy. Target: ratio <= 1.05.
"""

from __future__ import annotations

import argparse
import statistics
import time

import datasets
import torch
from transformers import BertConfig, BertForSequenceClassification

from methods.base import MethodContext, StudentDefaults, TaskInfo
from methods.finetune import Finetune
from pipeline.config import TrainConfig
from pipeline.training import batches, engine, loop

BATCH, LENGTH = 32, 64


def model_factory() -> BertForSequenceClassification:
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, num_labels=2)
    return BertForSequenceClassification(cfg)


def dataset(n: int) -> datasets.Dataset:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (n, LENGTH), generator=g)
    return datasets.Dataset.from_dict({
        "input_ids": ids.tolist(), "attention_mask": [[1] * LENGTH] * n,
        "token_type_ids": [[0] * LENGTH] * n, "labels": torch.randint(0, 2, (n,), generator=g).tolist(),
    })


def drydock_steps(data: datasets.Dataset, steps: int) -> list[float]:
    stamps: list[float] = []
    original = engine.Engine.optimizer_step

    def timed(self):
        out = original(self)
        stamps.append(time.perf_counter())
        return out

    engine.Engine.optimizer_step = timed
    try:
        ctx = MethodContext(task=TaskInfo("bench", 2, False), teacher=None, load_pretrained=model_factory,
                            student=StudentDefaults(num_layers=6), learning_rate=5e-5)
        method = Finetune({"init_from": "pretrained"}, ctx)
        train = TrainConfig(max_steps=steps, batch_size=BATCH, learning_rate=5e-5, eval_every=10**9, progress_bar=False)
        dev = {"dev": data.select(range(BATCH))}
        task = type("T", (), {"metrics": ("accuracy",), "primary_metric": "accuracy", "regression": False})()
        loop.run(method, train_set=data, dev=dev, task=task, train=train, seed=0)
    finally:
        engine.Engine.optimizer_step = original
    return [b - a for a, b in zip(stamps, stamps[1:])]


def plain_steps(data: datasets.Dataset, steps: int) -> list[float]:
    torch.manual_seed(0)
    model = model_factory().train()
    collated = [batches.collate([data[i] for i in range(s * BATCH, (s + 1) * BATCH)]) for s in range(steps)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    warmup = int(0.1 * steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: engine.lr_factor(s, steps, warmup, "linear"))
    stamps = []
    for batch in collated:
        labels = batch.pop("labels")
        loss = torch.nn.functional.cross_entropy(model(**batch).logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:])]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = dataset(args.steps * BATCH)
    ours, plain = [], []
    for _ in range(args.repeats):
        ours += drydock_steps(data, args.steps)[3:]  # drop warm-up steps
        plain += plain_steps(data, args.steps)[3:]
    a, b = statistics.median(ours), statistics.median(plain)
    print(f"threads={torch.get_num_threads()} batch={BATCH} seq={LENGTH} steps={args.steps}x{args.repeats}")
    print(f"drydock loop: median {a * 1000:.1f} ms/step")
    print(f"plain loop:   median {b * 1000:.1f} ms/step")
    print(f"ratio: {a / b:.3f}  (target <= 1.05)")


if __name__ == "__main__":
    main()
