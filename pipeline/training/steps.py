"""The loop's step count, in a module without torch: `drydock plan` and `drydock validate` count
steps as the loop does (`pipeline/training/loop.py`) without importing what the loop needs."""

from __future__ import annotations

import math

from pipeline.config import TrainConfig


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    return max(1, math.ceil(num_examples / batch_size))


def total_steps(train: TrainConfig, num_examples: int) -> int:
    steps = max(1, math.ceil(train.epochs * steps_per_epoch(num_examples, train.batch_size)))
    return min(steps, train.max_steps) if train.max_steps else steps
