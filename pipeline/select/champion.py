"""The champion policy: which configuration may carry the `champion` alias, and when it moves.

Pure functions of figures and registry tags (no MLflow, no I/O), so the rule is written once and
tested on values; `pipeline.select.registry` does the MLflow plumbing around them, and the
report and the Pareto selection read the budget through them.

- The latency budget (`selection.max_latency_ms`, `selection.min_speedup`) is judged by
  `budget_breaches` only. A candidate is judged on its best seed's own figures, the export the
  registry would get, not on the seed mean: CoFi's seeds prune to different sizes, and a mean
  within the budget can hide a registered model over it. A candidate must prove it is within
  the budget, so a missing figure breaks it; a champion already registered is judged only on
  what its tags record, so a missing figure there breaks nothing.
- which row may carry the alias (the most accurate on the front within the budget, ties to the
  faster) is `pipeline.select.front.choose_champion`, for configurations and variants alike.
- `decide`: the alias moves only forward. A new champion must beat the current champion's metric
  on the same data, so re-running a sweep that came out worse never silently replaces a better
  model. Every version records the dev set its `metric` was measured on (`pipeline.select.dev_set`:
  task, label set, a digest of the rows); when the champion's was another one, the recorded
  numbers are not compared: both versions are re-scored on this sweep's dev set (`Rescored`, done
  by the registry) and those scores decide. A champion of another task, label set or metric never
  competes: the alias stays, and moving it is a decision for a person (`drydock promote`).
  The one exception to "better on the same data" is the budget: a champion
  whose recorded latency or speedup is outside the *current* sweep's budget gives way to this
  sweep's champion (which is within it) whatever the metrics; if this sweep has no champion, the
  alias stays and `decide_without_candidate` says the champion is outside the budget.
  `drydock promote` moves the alias by hand, outside this policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.config import SelectionConfig
from pipeline.select.dev_set import DATA_TAG, LABELS_TAG, TASK_TAG

CHAMPION = "champion"  # the registry alias consumers load: models:/<name>@champion


def tag_number(text: str | None) -> float:
    """A figure as the registry's tags hold it (text); NaN when absent or not a number."""
    try:
        return float(text) if text is not None else math.nan
    except ValueError:
        return math.nan


def _missing(value: float | None) -> bool:
    return value is None or math.isnan(value)


# ----------------------------------------------------------------------------------------------
# the latency budget
# ----------------------------------------------------------------------------------------------


def budget_breaches(latency_ms: float | None, speedup: float | None, budget: SelectionConfig | None, *,
                    unknown_breaks: bool) -> list[str]:
    """The conditions these figures break, as the report and the registry's log word them; empty
    when within. `unknown_breaks`: a missing figure breaks the budget (a candidate), or is not
    judged (a registered champion's tags); a candidate without a latency is never within, with
    or without a budget."""
    broken = []
    max_latency = budget.max_latency_ms if budget is not None else None
    min_speedup = budget.min_speedup if budget is not None else None
    if _missing(latency_ms):
        if unknown_breaks:
            broken.append("latency not measured")
    elif max_latency is not None and latency_ms is not None and latency_ms > max_latency:
        broken.append(f"latency {latency_ms:.2f} ms > {max_latency:g} ms")
    if min_speedup is not None:
        if _missing(speedup):
            if unknown_breaks:
                broken.append("speedup not measured")
        elif speedup is not None and speedup < min_speedup:
            broken.append(f"speedup {speedup:.2f}× < {min_speedup:g}×")
    return broken


def budget_text(budget: SelectionConfig) -> str | None:
    """`latency ≤ 3 ms and speedup ≥ 2×`; None without a budget."""
    parts = []
    if budget.max_latency_ms is not None:
        parts.append(f"latency ≤ {budget.max_latency_ms:g} ms")
    if budget.min_speedup is not None:
        parts.append(f"speedup ≥ {budget.min_speedup:g}×")
    return " and ".join(parts) or None


def champion_rule(budget: SelectionConfig) -> str:
    """The rule `pipeline.select.front.choose_champion` applies, in the report's words."""
    text = budget_text(budget)
    if text is None:
        return "best mean metric on the front (no latency budget)"
    return f"best mean metric on the front whose registered seed is within {text}"


# ----------------------------------------------------------------------------------------------
# moving the alias (on the tags the registry holds)
# ----------------------------------------------------------------------------------------------


def outside_budget(tags: dict[str, str], budget: SelectionConfig | None) -> str | None:
    """How a registered version's recorded latency / speedup breaks `budget`; None when it does
    not, or when the figure is not recorded (nothing to judge)."""
    broken = budget_breaches(tag_number(tags.get("latency_ms")), tag_number(tags.get("speedup")), budget,
                             unknown_breaks=False)
    return " and ".join(broken) or None


def incomparable(candidate_tags: dict[str, str], current_tags: dict[str, str]) -> str | None:
    """Why these two versions cannot compete at all (another metric, task or label set); None when
    they can. A tag one of them lacks (a version registered before drydock recorded it) is not a
    difference: re-scoring it on this sweep's dev set settles whether it answers in these labels."""
    by_hand = "promote by hand if intended"
    if candidate_tags.get("metric_name") != current_tags.get("metric_name"):
        return (f"the champion is scored by {current_tags.get('metric_name')!r} and this candidate by "
                f"{candidate_tags.get('metric_name')!r}: not comparable, {by_hand}")
    for key, what in ((TASK_TAG, "task"), (LABELS_TAG, "label set")):
        mine, theirs = candidate_tags.get(key), current_tags.get(key)
        if mine is not None and theirs is not None and mine != theirs:
            return (f"the champion was trained for the {what} {theirs} and this candidate for {mine}: "
                    f"another {what} never competes, {by_hand}")
    return None


def needs_rescore(candidate_tags: dict[str, str], current_tags: dict[str, str]) -> bool:
    """The champion's recorded metric was measured on other rows than the candidate's (or on rows
    it does not record), so the recorded numbers say nothing about each other."""
    data = candidate_tags.get(DATA_TAG)
    return data is not None and current_tags.get(DATA_TAG) != data


@dataclass(frozen=True)
class Rescored:
    """Both versions scored on this sweep's dev set by one procedure (the registry consumer's)."""

    candidate: float
    champion: float
    data: str  # the dev set, as `DevSet.describe` words it


def beats_champion(candidate_tags: dict[str, str], current_tags: dict[str, str] | None,
                   budget: SelectionConfig | None = None, rescored: Rescored | None = None) -> tuple[bool, str]:
    """(move?, why). The candidate is within `budget` (the current sweep's) by construction; a
    comparable champion outside it gives way whatever the metrics. `rescored`: the two scores on
    this sweep's dev set, given when `needs_rescore`; without them the recorded metrics decide."""
    if current_tags is None:
        return True, "no champion yet"
    reason = incomparable(candidate_tags, current_tags)
    if reason is not None:
        return False, reason
    outside = outside_budget(current_tags, budget)
    if outside is not None:
        return True, f"the champion is outside this sweep's latency budget ({outside})"
    name = candidate_tags.get("metric_name")
    if rescored is not None:
        recorded = tag_number(current_tags.get("metric"))
        was = "" if math.isnan(recorded) else f"; it recorded {recorded:.4f} on other data"
        where = f"on this sweep's dev set ({rescored.data})"
        if math.isnan(rescored.champion) and not math.isnan(rescored.candidate):
            return True, f"the champion's {name} is not a number {where}; this candidate's is {rescored.candidate:.4f}"
        if rescored.candidate > rescored.champion:
            return True, f"{name} {rescored.candidate:.4f} beats the champion's {rescored.champion:.4f} {where}{was}"
        return False, f"{name} {rescored.candidate:.4f} does not beat the champion's {rescored.champion:.4f} {where}{was}"
    new, old = tag_number(candidate_tags.get("metric")), tag_number(current_tags.get("metric"))
    if math.isnan(old):
        return True, "the champion has no recorded metric"
    if new > old:
        return True, f"{name} {new:.4f} beats the champion's {old:.4f}"
    return False, f"{name} {new:.4f} does not beat the champion's {old:.4f}"


@dataclass
class ChampionDecision:
    moved: bool
    version: str | None  # the champion after the decision
    previous: str | None
    reason: str


def decide(candidate: str, candidate_tags: dict[str, str], current: str | None, current_tags: dict[str, str] | None,
           budget: SelectionConfig | None = None, rescored: Rescored | None = None) -> ChampionDecision:
    """Whether the alias moves from version `current` (None: no champion yet) to `candidate`."""
    if current == candidate:
        return ChampionDecision(False, current, current, "already the champion")
    move, reason = beats_champion(candidate_tags, current_tags, budget, rescored)
    return ChampionDecision(True, candidate, current, reason) if move else ChampionDecision(False, current, current, reason)


def decide_without_candidate(current: str | None, current_tags: dict[str, str] | None,
                             budget: SelectionConfig | None) -> ChampionDecision | None:
    """This sweep has no champion: the alias stays where it is. Worth a decision (and a log line)
    only when the champion it stays on is outside this sweep's budget."""
    if current is None or current_tags is None:
        return None
    outside = outside_budget(current_tags, budget)
    if outside is None:
        return None
    reason = (f"the champion is outside this sweep's latency budget ({outside}), but no configuration of "
              "this sweep meets it either")
    return ChampionDecision(False, current, current, reason)
