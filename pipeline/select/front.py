"""The front, the budget filter and the champion rule: written once, for every table the select
stage chooses from.

Two tables are chosen from: the configurations of results.parquet (`pipeline.select.pareto`:
seed means, eager fp32, one latency per configuration) and the (configuration, runtime) rows of
variants.parquet (`pipeline.select.variants`: each runtime timed interleaved, with intervals). A
`Columns` names where a table keeps what the rules read; the rules are the same:

- **dominance** (`pipeline.measure.interleaved.dominates`): metric ↑, latency ↓ [, size ↓],
  where a latency difference inside the intervals never decides. A configuration's latency is a
  point (its interval is [latency, latency]), for which this is plain Pareto dominance.
- **the front** (`front_mask`): every candidate no other dominates; without the size objective,
  the smaller of two that tie exactly on the metric (and are kept by the rule above) wins. A
  table that gives no sizes (the configurations without `size_objective`) keeps exact ties.
- **the budget** (`within_budget`): `selection.max_latency_ms` and `selection.min_speedup`,
  judged by `pipeline.select.champion.budget_breaches` on the figures a table names for it (a
  configuration: its served seed's own, the export the registry gets; a variant: its p50 and
  median speedup at the front's shape); a missing figure breaks it.
- **the champion** (`choose_champion`): the most accurate row within the budget; ties by
  `pipeline.measure.interleaved.rank` (faster where the latencies separate, else smaller, then
  the table's order).
- **exact ties** (`exact_ties`): rows at one point (metric, latency interval and size all equal)
  are one point of the front; the registry registers one of them, the one the champion rule
  picks among them (a sweep of a thousand configurations of one architecture whose metrics tie
  would otherwise register every one).

Pure: no I/O, no MLflow, no timing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import pandas as pd

from pipeline.config import SelectionConfig
from pipeline.measure.interleaved import Candidate, Interval, dominates, rank
from pipeline.select.champion import budget_breaches


@dataclass(frozen=True)
class Columns:
    """Where a table keeps what the front, the budget and the champion read."""

    metric: str
    latency_low: str  # the latency interval at the front's shape (a point: the same column twice)
    latency_high: str
    size: str | None  # None: no size (exact metric ties are then all kept)
    budget_latency: str  # the figures the budget is judged on
    budget_speedup: str
    names: tuple[str, ...] = ()  # the columns a row's name is joined from ("/"); none: its position


# a configuration of results.parquet (`pipeline.select.pareto.aggregate`): seed means; the budget on
# the served seed's own figures
CONFIGS = Columns("metric_mean", "latency_ms", "latency_ms", None, "best_latency_ms", "best_speedup")
# with `selection.size_objective`: the configurations' mean parameter count is the third objective
SIZED_CONFIGS = replace(CONFIGS, size="num_params")
# a (configuration, runtime) row of variants.parquet: intervals at the front's shape, file sizes
# (named "<trial_id>/<runtime>", as `pipeline.measure.job.runner_name` names them)
VARIANTS = Columns("metric", "latency_low_ms", "latency_high_ms", "size_bytes", "latency_ms", "speedup", ("trial_id", "runtime"))


def number(value: Any) -> float:
    """A table's cell as a float; NaN for null (None, pd.NA, NaN)."""
    return math.nan if value is None or value is pd.NA or pd.isna(value) else float(value)


def candidate(row: pd.Series, columns: Columns, name: str) -> Candidate:
    """A row as the rules compare it (a size of 0 where the table gives none: it then never decides)."""
    size = number(row[columns.size]) if columns.size is not None else 0.0
    return Candidate(name=name, metric=number(row[columns.metric]),
                     latency=Interval(number(row[columns.latency_low]), number(row[columns.latency_high])), size=size)


def row_names(table: pd.DataFrame, columns: Columns) -> list[str]:
    """Each row's name: its `columns.names` joined by "/", else its position (zero-padded, so a
    tie the rules leave open goes to the table's order)."""
    if not columns.names:
        return [f"{i:09d}" for i in range(len(table))]
    return ["/".join(str(row[c]) for c in columns.names) for _, row in table.iterrows()]


def candidates(table: pd.DataFrame, columns: Columns) -> list[Candidate]:
    """Every row as a `Candidate`, named by `row_names`."""
    return [candidate(row, columns, name) for (_, row), name in zip(table.iterrows(), row_names(table, columns))]


def complete(c: Candidate, size_objective: bool) -> bool:
    """It has every figure the front compares (a candidate without one is never on it)."""
    needed = [c.metric, c.latency.low, c.latency.high] + ([c.size] if size_objective else [])
    return not any(math.isnan(x) for x in needed)


def front_mask(cands: Sequence[Candidate], *, size_objective: bool = False) -> list[bool]:
    """True for the candidates on the front (the module docstring's rule); one without every
    figure is never on it and dominates none. Without `size_objective`, size only breaks an
    exact metric tie between two the metric and latency rule keeps (their intervals then
    overlap: neither is faster than the other, or it would dominate it), so the relation never
    runs in a circle and the front is never empty."""
    valid = [c for c in cands if complete(c, size_objective)]
    keep = [complete(c, size_objective) and not any(dominates(o, c, size=size_objective) for o in valid if o is not c)
            for c in cands]
    if size_objective:
        return keep
    kept = [c for c, k in zip(cands, keep) if k]
    return [k and not any(o.metric == c.metric and o.size < c.size for o in kept) for c, k in zip(cands, keep)]


def within_budget(table: pd.DataFrame, budget: SelectionConfig | None, columns: Columns = CONFIGS) -> pd.Series:
    """Per row: within `budget` on the figures `columns` names for it (a missing one breaks it)."""
    latency = table[columns.budget_latency].map(number) if len(table) else pd.Series([], dtype="float64")
    speedup = table[columns.budget_speedup].map(number) if len(table) else pd.Series([], dtype="float64")
    ok = [not budget_breaches(lat, spd, budget, unknown_breaks=True) for lat, spd in zip(latency, speedup)]
    return pd.Series(ok, index=table.index, dtype=bool)


def choose_champion(table: pd.DataFrame, budget: SelectionConfig | None, columns: Columns = CONFIGS) -> pd.Series | None:
    """The champion rule: the most accurate row within `budget`, ties by `rank`; None when no row
    qualifies. The caller gives the rows that may carry the alias (the front: only it is registered)."""
    if not len(table):
        return None
    eligible = table[within_budget(table, budget, columns)]
    cands = [c for c in candidates(eligible, columns) if not math.isnan(c.metric)]
    if not cands:
        return None
    best = max(c.metric for c in cands)
    first = rank([c for c in cands if c.metric == best])[0]
    return eligible.iloc[row_names(eligible, columns).index(first.name)]


def exact_ties(table: pd.DataFrame, columns: Columns = CONFIGS) -> list[tuple[pd.Series, pd.DataFrame]]:
    """The rows grouped by their exact point (metric, latency interval, size where the table has
    one, and the figures the budget is judged on), in the order of each point's first row: per point, the row the champion rule picks
    among them (`choose_champion` without a budget) and the others, tied with it."""
    points: dict[tuple[float, ...], list[int]] = {}
    budget: list[list[float]] = [[number(v) for v in table[column]] if len(table) else []
                                 for column in (columns.budget_latency, columns.budget_speedup)]
    for position, (c, *figures) in enumerate(zip(candidates(table, columns), *budget, strict=True)):
        # the budget's figures too: rows that differ there are not one choice for the champion rule
        points.setdefault((c.metric, c.latency.low, c.latency.high, c.size, *figures), []).append(position)
    groups = []
    for positions in points.values():
        group = table.iloc[positions].reset_index(drop=True)
        chosen = choose_champion(group, None, columns) if len(group) > 1 else None
        at = 0 if chosen is None else cast(int, chosen.name)  # the group's own index: 0, 1, ...
        # the row as `iterrows` gives it, as callers had it before ties were grouped: Python
        # scalars, where `iloc` keeps numpy's (np.float64(0.81) in a tag's text)
        first = next(row for i, row in group.iterrows() if i == at)
        groups.append((first, group.drop(index=at)))
    return groups
