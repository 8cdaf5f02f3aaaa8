"""The front over (configuration, runtime) of the measurement table (`pipeline.measure.table`,
`variants.parquet`, whose columns that module lists), and what each stage of the compression stack
bought (issue #22, items 3 and 4).

Pure: no Ray, no MLflow, no model loading. `variant_rows` makes the table with its front marked,
`variant_front` marks it, `variant_champion` picks from it, `stack_summary` words the report's line.

`pareto`, as in results.parquet: True on the front, False for the other candidates, null where a
row was never a candidate — the teacher's variants (shown beside the students, never on their
front), a variant with an `error`, one without a metric or a latency at the front's shape, and,
when a budget is given, one outside it.

The front, the budget and the champion are `pipeline.select.front`'s rules (the configurations'
too), on the columns `front.VARIANTS` names: latency intervals at the front's shape, where a
difference inside them never decides, and `size_bytes` (a tie-break, or with
`selection.size_objective` a third objective); the budget on the p50 (the best estimate of what
it serves at, so the budget does not move with the noise) and the median `speedup`.
Unlike results.parquet, where the front ignores the budget and the champion is picked from the
front within it, variants outside the budget are no candidates when a budget is given: a variant
beaten only by one over the budget is then on the front, and the champion (`variant_champion`)
is the most accurate variant within the budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from pipeline.config import SelectionConfig, Shape
from pipeline.measure.interleaved import InterleavedResult, dominates
from pipeline.measure.job import TEACHER, VariantFacts, runner_name
from pipeline.measure.runtimes import EAGER, QUANTIZED
from pipeline.measure.runtimes import label as runtime_label
from pipeline.measure.table import measurement_rows
from pipeline.select import front
from pipeline.select.front import VARIANTS

INT8 = QUANTIZED  # the stack summary's quantized runtime (`pipeline.measure.runtimes`)


def variant_rows(
    facts: Sequence[VariantFacts],
    measurements: Mapping[str, InterleavedResult] | Mapping[Shape, InterleavedResult],
    *,
    front_shape: Shape | str,
    device: str,
    threads: int | None,
    budget: SelectionConfig | None = None,
) -> pd.DataFrame:
    """The measurement table (`pipeline.measure.table.measurement_rows`, whose arguments these
    are) with `pareto` marked by `variant_front` under `budget` (the spec's `selection`)."""
    return variant_front(measurement_rows(facts, measurements, front_shape=front_shape, device=device, threads=threads), budget)


# ----------------------------------------------------------------------------------------------
# the front
# ----------------------------------------------------------------------------------------------


def candidates_mask(table: pd.DataFrame, budget: SelectionConfig | None = None) -> pd.Series:
    """The rows that take part in the front: students without an error, with a metric and a
    latency interval at the front's shape (and a size, with `budget.size_objective`), within the
    budget's limits (where it sets any)."""
    if not len(table):
        return pd.Series([], dtype=bool)
    budget = budget or SelectionConfig()
    sized = ["size_bytes"] if budget.size_objective else []
    ok = (table["trial_id"].astype("string") != TEACHER).fillna(False).astype(bool) & table["error"].isna()
    ok &= table[["metric", "latency_ms", "latency_low_ms", "latency_high_ms", *sized]].notna().all(axis=1)
    if budget.max_latency_ms is not None or budget.min_speedup is not None:
        ok &= front.within_budget(table, budget, VARIANTS)
    return ok.astype(bool)


def variant_front(table: pd.DataFrame, budget: SelectionConfig | None = None) -> pd.DataFrame:
    """The table with `pareto` marked: True on the front (`pipeline.select.front.front_mask`) of
    the candidates (`candidates_mask`) under `budget`, False for the other candidates, null for
    every row that was not one."""
    table = table.copy()
    rows = table[candidates_mask(table, budget)]
    marks = pd.Series(pd.NA, index=table.index, dtype="boolean")
    if len(rows):
        sized = budget is not None and budget.size_objective
        marks.loc[rows.index] = front.front_mask(front.candidates(rows, VARIANTS), size_objective=sized)
    table["pareto"] = marks
    return table


def variant_champion(table: pd.DataFrame, budget: SelectionConfig | None = None) -> pd.Series | None:
    """The champion rule (`pipeline.select.front.choose_champion`, the configurations' too) over
    the variants' front under `budget`: its most accurate variant, ties by `rank` (faster where
    the intervals separate, else smaller, then name). None when no variant qualifies."""
    marked = variant_front(table, budget)
    on_front = marked[marked["pareto"].fillna(False).astype(bool)]
    return front.choose_champion(on_front, budget, VARIANTS)


def served_front(variants: pd.DataFrame, configs: pd.DataFrame, budget: SelectionConfig | None) -> pd.DataFrame:
    """The variants of the exports the registry serves (each configuration's `best_trial_id`),
    their front marked again among themselves under `budget`."""
    served = set(configs["best_trial_id"].astype(str))
    rows = variants[variants["trial_id"].astype(str).isin(served)]
    return variant_front(rows, budget)


def served_marked(variants: pd.DataFrame, configs: pd.DataFrame, budget: SelectionConfig | None) -> pd.DataFrame:
    """The whole variants table (every seed timed, the teacher) with `pareto` as the registry
    registers it: `served_front`'s marks on the served exports' rows, False on the other seeds'
    that were candidates (the teacher's and the other rows' nulls stay). What the report's
    Runtimes table, its stack line and the plot's variant front show, so that none names a
    variant that is never served."""
    if not len(configs):
        return variants
    served = served_front(variants, configs, budget)
    marked = variants.copy()
    students = marked["trial_id"].astype(str) != TEACHER
    marked.loc[students & marked["pareto"].notna(), "pareto"] = False
    marked.loc[served.index, "pareto"] = served["pareto"]
    return marked


def has_variants(variants: pd.DataFrame | None) -> bool:
    """Whether the select stage ran the variants job (several runtimes, or several shapes in
    eager fp32 alone): the registry then offers the alias to `served_champion`, and to no
    configuration when that is None."""
    return variants is not None and len(variants) > 0


def beyond_eager(variants: pd.DataFrame | None) -> bool:
    """Whether any runtime other than eager fp32 was timed: the command prints a runtimes table."""
    return has_variants(variants) and not set(variants["runtime"].dropna()) <= {EAGER}  # type: ignore[index]


def served_champion(variants: pd.DataFrame | None, configs: pd.DataFrame, budget: SelectionConfig | None = None) -> pd.Series | None:
    """The variant the registry offers the alias to (`variant_registry.register_variant_front`),
    the alias's candidate: the champion of the served exports' front. What every table, the
    report and the plot mark ◆: a weaker seed's variant may score higher than its
    configuration's best seed's, but it is never served. None when no variant qualifies, or
    without variants (`has_variants`: the configurations' champion, `pareto.select`, is then
    the candidate)."""
    if not has_variants(variants) or not len(configs):
        return None
    return variant_champion(served_front(variants, configs, budget), budget)  # type: ignore[arg-type]


def dominated_by(table: pd.DataFrame, trial_id: str, runtime: str, budget: SelectionConfig | None = None) -> list[str]:
    """The student variants ("<trial_id>/<runtime>") that dominate this row on the front's rule
    (`dominates`; without `budget.size_objective`, equally accurate within the noise and smaller
    counts too): for the report's "which students dominate the teacher's int8 variant". Empty when
    the row is not there or has no metric or latency; the students are the candidates whatever the
    budget's limits (only its objectives are read)."""
    rows = table[(table["trial_id"] == trial_id) & (table["runtime"] == runtime)]
    if not len(rows):
        return []
    target = front.candidates(rows.iloc[:1], VARIANTS)[0]
    if not front.complete(target, size_objective=False):
        return []
    size_objective = budget is not None and budget.size_objective
    students = table[candidates_mask(table, SelectionConfig(size_objective=size_objective))]
    return [c.name for c in front.candidates(students, VARIANTS)
            if c.name != target.name and dominates(c, target, size=size_objective, size_breaks_ties=not size_objective)]


# ----------------------------------------------------------------------------------------------
# what each stage of the stack bought
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackStep:
    """One step of teacher fp32 → teacher int8 → student fp32 → student int8, at the front's shape."""

    label: str  # "teacher fp32", "teacher int8", "student fp32", "student int8"
    trial_id: str
    runtime: str
    metric: float | None  # None: the variant is not in the table (not built, or its runtime not selected)
    speedup: float | None  # over the teacher in eager fp32 (the within-round median)
    speedup_low: float | None
    speedup_high: float | None
    step_speedup: float | None  # speedup / the previous step's speedup; None for the first step or a missing one
    metric_delta: float | None  # metric - the previous step's metric; None likewise


@dataclass(frozen=True)
class StackSummary:
    shape: str
    metric_name: str | None
    champion: str  # runner_name of the champion variant
    steps: tuple[StackStep, ...]

    def line(self) -> str:
        """The report's sentence: each step's speedup over the one before and its metric change in
        points (× 100), then the last step against the teacher in eager fp32."""
        name = self.metric_name or "metric"
        first, last = self.steps[0], self.steps[-1]
        parts = [f"{first.label} ({name} {_fmt(first.metric, '.4f')})"]
        for step in self.steps[1:]:
            parts.append(f"{step.label} {_fmt(step.step_speedup, '.2f')}× ({_points(step.metric_delta)})")
        total = (f"{last.label} in all {_fmt(last.speedup, '.2f')}× [{_fmt(last.speedup_low, '.2f')}-"
                 f"{_fmt(last.speedup_high, '.2f')}] the teacher's eager fp32 speed, "
                 f"{_points(_delta(last.metric, first.metric))}")
        return (f"What each stage of the stack bought at {self.shape} (speedups are within-round medians over the "
                f"teacher in eager fp32; the student is the champion's configuration, {self.champion}): "
                f"{' → '.join(parts)}; {total}.")


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None or math.isnan(value) else format(value, spec)


def _points(delta: float | None) -> str:
    return "n/a" if delta is None or math.isnan(delta) else f"{delta * 100:+.2f} pts"


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _step(table: pd.DataFrame, label: str, trial_id: str, runtime: str, previous: StackStep | None) -> StackStep:
    rows = table[(table["trial_id"] == trial_id) & (table["runtime"] == runtime)]
    row = rows.iloc[0] if len(rows) else None

    def figure(column: str) -> float | None:
        value = front.number(row[column]) if row is not None else math.nan
        return None if math.isnan(value) else value

    metric, speedup = figure("metric"), figure("speedup")
    ratio = None
    if previous is not None and speedup is not None and previous.speedup:
        ratio = speedup / previous.speedup
    return StackStep(label, trial_id, runtime, metric, speedup, figure("speedup_low"), figure("speedup_high"), ratio,
                     _delta(metric, previous.metric) if previous is not None else None)


def stack_summary(table: pd.DataFrame, budget: SelectionConfig | None = None, *, quantized: str = INT8) -> StackSummary | None:
    """How much each stage of the stack bought (issue #22, item 4): teacher fp32 → teacher int8
    → student fp32 → student int8, where the student is the champion's trial (`variant_champion`,
    whichever runtime won) and "int8" is `quantized`. Speedups are the table's (over the teacher
    in eager fp32, at the front's shape); each step's `step_speedup` is its speedup over the
    previous step's (a ratio of two within-round medians: not itself measured within rounds).
    None when there is no champion."""
    champion = variant_champion(table, budget)
    if champion is None:
        return None
    student = str(champion["trial_id"])
    plan = ((f"teacher {runtime_label(EAGER)}", TEACHER, EAGER), (f"teacher {runtime_label(quantized)}", TEACHER, quantized),
            (f"student {runtime_label(EAGER)}", student, EAGER), (f"student {runtime_label(quantized)}", student, quantized))
    steps: list[StackStep] = []
    for label, trial_id, runtime in plan:
        steps.append(_step(table, label, trial_id, runtime, steps[-1] if steps else None))
    names = table["metric_name"].dropna()
    return StackSummary(shape=str(champion["front_shape"]), metric_name=str(names.iloc[0]) if len(names) else None,
                        champion=runner_name(student, str(champion["runtime"])), steps=tuple(steps))
