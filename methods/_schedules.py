"""Schedules: pure functions of training progress, evaluated by a method's `on_step`.

Keeping them free of state (nanoGPT's `get_lr` habit) means a resumed trial recomputes exactly
the value it would have had, tests can pin any step, and the logged `schedule/<name>` is the
value the next loss used.

Module replacing (BERT-of-Theseus, arXiv 2002.02925) anneals the replacement rate p, the
probability that a module runs its successor:

- `linear` (the paper's curriculum): p(t) = min(1, b + k·t), where t is the optimizer step. The
  slope k is given directly or through the number of steps R until p reaches 1, k = (1 − b)/R.
- `constant`: p(t) = b while replacing, then 1 (successor fine-tuning), as the official
  `ConstantReplacementScheduler` does; b plays the role of the constant p.
- `anti_curriculum` (the paper's Table 6, absent from the official code): 1 − min(1, b + k·t)
  for the same b and k, i.e. falling from 1 − b towards 0 over R steps, then 1 (successor
  fine-tuning), so the exported successors are always trained alone at the end.

Deterministic Continuous Replacement anneals a blend weight alpha (1 = teacher only, 0 =
student only) along a piecewise-linear curve of the training fraction; `AGGR20` is the DCR
paper's aggressive schedule.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Literal

ReplacementScheduleKind = Literal["linear", "constant", "anti_curriculum"]

# alpha: 1 → 0.3 over the first 10% of training, 0.3 → 0 over the next 10%, then 0
AGGR20: tuple[tuple[float, float], ...] = ((0.0, 1.0), (0.1, 0.3), (0.2, 0.0))


def steps_until_full_rate(
    base_rate: float,
    total_steps: int,
    slope: float | None = None,
    replacing_steps: int | None = None,
    replacing_fraction: float = 0.5,
) -> float:
    """R, the step at which the replacement rate reaches 1 (the replacing phase's length).

    Precedence: the slope k (R = (1 − b)/k, possibly fractional), an absolute step count, else a
    fraction of training rounded to whole steps. The paper states R in steps ({1k, 5k, 10k, 30k});
    a fraction carries the same meaning across data sets of different sizes.
    """
    if slope is not None and replacing_steps is not None:
        raise ValueError("give either slope or replacing_steps, not both")
    if slope is not None:
        if slope <= 0:
            raise ValueError(f"slope must be positive, got {slope}")
        return (1.0 - base_rate) / slope
    if replacing_steps is not None:
        return float(replacing_steps)
    return float(round(replacing_fraction * total_steps))


def replacement_rate(step: int, kind: ReplacementScheduleKind, base_rate: float, full_rate_step: float) -> float:
    """p(t) for the Theseus schedules; `full_rate_step` is R from `steps_until_full_rate`.

    Written as b + (1 − b)·t/R rather than b + k·t so that p is exactly 1 from step R on: the
    predecessors are then never run, which a rate of 0.9999999 would not guarantee.
    """
    if step >= full_rate_step:
        return 1.0
    if kind == "constant":
        return base_rate
    curriculum = base_rate + (1.0 - base_rate) * step / full_rate_step
    if kind == "linear":
        return curriculum
    if kind == "anti_curriculum":
        return 1.0 - curriculum
    raise ValueError(f"unknown replacement schedule {kind!r}")


def replacing_phase_steps(full_rate_step: float, total_steps: int) -> int:
    """Whole optimizer steps with p < 1, capped by the training length."""
    return max(0, min(total_steps, math.ceil(full_rate_step)))


def piecewise_linear(fraction: float, points: Sequence[tuple[float, float]]) -> float:
    """Linear interpolation through (fraction, value) points, constant outside them.

    Past the last point the last value holds exactly (no interpolation rounding), so a schedule
    ending at 0 is exactly 0 from there on and the teacher branch can be skipped.
    """
    if not points:
        raise ValueError("a piecewise-linear schedule needs at least one point")
    if fraction <= points[0][0]:
        return float(points[0][1])
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if fraction < x1:
            return y0 + (y1 - y0) * (fraction - x0) / (x1 - x0)
    return float(points[-1][1])


def validate_points(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Fractions strictly increasing in [0, 1], values in [0, 1]; a clear error otherwise."""
    points = [(float(x), float(y)) for x, y in points]
    if not points:
        raise ValueError("points must list at least one (fraction, value) pair")
    for x, y in points:
        if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
            raise ValueError(f"point ({x}, {y}) must have fraction and value in [0, 1]")
    fractions = [x for x, _ in points]
    if any(b <= a for a, b in itertools.pairwise(fractions)):
        raise ValueError(f"point fractions {fractions} must be strictly increasing")
    return points


def linear_anneal_points(fraction: float) -> tuple[tuple[float, float], ...]:
    """1 → 0 linearly over the first `fraction` of training, then 0."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"anneal fraction must be in (0, 1], got {fraction}")
    return ((0.0, 1.0), (fraction, 0.0))
