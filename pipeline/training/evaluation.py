"""Dev-set evaluation during training: logits over a dataset in order, then the task's metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from methods.base import logits_of
from pipeline.prepare.metrics import compute_metrics
from pipeline.prepare.padding import length_batches
from pipeline.training.batches import collate


@torch.no_grad()
def predict(model: nn.Module, dataset, batch_size: int, device: torch.device, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels over a dataset, in the dataset's order (evaluation is not sharded: dev
    sets are small and every rank computing the same numbers keeps ranks in lock-step without a
    gather). The batches take the rows by length, so each pads to about its own rows' length:
    on SST-2's dev set that is 1.04x the rows' tokens where batches in order computed 1.91x
    (benchmarks/RESULTS.md, "Grouping by length"); the metrics do not depend on the order."""
    was_training = model.training
    model.eval()
    batches, back = length_batches(dataset, batch_size)
    logits, labels = [], []
    for picks in batches:
        columns = dataset[picks]  # one Arrow take, not row by row
        batch = collate([dict(zip(columns, values)) for values in zip(*columns.values())], pad_id)
        inputs = {k: v.to(device) for k, v in batch.items() if k != "labels"}
        logits.append(logits_of(model(**inputs)).float().cpu())
        if "labels" in batch:
            labels.append(batch["labels"])
    model.train(was_training)
    return torch.cat(logits).numpy()[back], (torch.cat(labels).numpy()[back] if labels else np.array([]))


def evaluate(model: nn.Module, dev: Mapping[str, Any], task, batch_size: int, device: torch.device, pad_id: int = 0) -> dict[str, float]:
    """Task metrics on every dev split: `eval/<metric>` for "dev", `eval_<split>/<metric>` else."""
    out: dict[str, float] = {}
    for split, dataset in dev.items():
        logits, labels = predict(model, dataset, batch_size, device, pad_id)
        prefix = "eval" if split == "dev" else f"eval_{split.removeprefix('dev_')}"
        for name, value in compute_metrics(task.metrics, logits, labels, task.regression).items():
            out[f"{prefix}/{name}"] = float(value)
    return out
