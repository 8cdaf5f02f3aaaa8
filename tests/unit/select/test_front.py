"""The front, the budget filter and the champion rule on plain values: dominance with intervals
that never decide inside the noise, exact ties, the size objective, the budget on the figures a
table names for it, and the champion's tie-break."""

from __future__ import annotations

import math

import pandas as pd

from pipeline.config import SelectionConfig
from pipeline.measure.interleaved import Candidate, Interval
from pipeline.select.front import (
    CONFIGS,
    SIZED_CONFIGS,
    VARIANTS,
    candidates,
    choose_champion,
    exact_ties,
    front_mask,
    row_names,
    within_budget,
)

NAN = math.nan
BOTH = SelectionConfig(max_latency_ms=5.0, min_speedup=2.0)


def points(rows: list[list[float]]) -> list[Candidate]:
    """(metric, latency[, size]) rows as configurations are compared: a latency is a point."""
    return [Candidate(f"{i:09d}", r[0], Interval(r[1], r[1]), r[2] if len(r) > 2 else 0.0) for i, r in enumerate(rows)]


# ----------------------------------------------------------------------------------------------
# the front
# ----------------------------------------------------------------------------------------------


def test_the_front_keeps_ties_and_drops_dominated_and_unmeasured_points():
    # (metric ↑, latency ↓)
    values = [
        [0.90, 10.0],  # best metric
        [0.80, 5.0],   # faster, worse: on the front
        [0.80, 5.0],   # an exact tie with the previous: both stay
        [0.79, 6.0],   # dominated by the 0.80 / 5.0 points
        [0.90, 12.0],  # same metric as the first, slower: dominated
        [0.95, NAN],   # never measured: not a candidate
    ]
    assert front_mask(points(values)) == [True, True, True, False, False, False]


def test_size_objective_brings_a_smaller_but_slower_model_onto_the_front():
    values = [[0.8, 5.0, 1000], [0.8, 6.0, 500]]
    assert front_mask(points([v[:2] for v in values])) == [True, False]
    assert front_mask(points(values), size_objective=True) == [True, True]


def test_overlapping_intervals_never_decide_and_the_smaller_breaks_an_exact_tie():
    a = Candidate("a", 0.85, Interval(4.0, 5.0), 900)
    b = Candidate("b", 0.85, Interval(4.5, 5.5), 500)  # overlaps a: as fast; same metric; smaller
    c = Candidate("c", 0.84, Interval(4.2, 4.8), 100)  # as fast, less accurate: dominated by both
    assert front_mask([a, b, c]) == [False, True, False]
    assert front_mask([a, b, c], size_objective=True) == [False, True, True]  # c is the smallest


def test_a_table_reads_through_its_columns():
    table = pd.DataFrame({"trial_id": ["s1", "s2"], "runtime": ["torch", "onnxruntime"], "metric": [0.8, 0.7],
                          "latency_low_ms": [1.0, 2.0], "latency_high_ms": [1.5, 2.5], "size_bytes": [10, None],
                          "latency_ms": [1.2, 2.2], "speedup": [3.0, 2.0]})
    assert row_names(table, VARIANTS) == ["s1/torch", "s2/onnxruntime"]
    first, second = candidates(table, VARIANTS)
    assert (first.metric, first.latency, first.size) == (0.8, Interval(1.0, 1.5), 10.0)
    assert math.isnan(second.size)
    configs_table = pd.DataFrame({"metric_mean": [0.8], "latency_ms": [2.0], "num_params": [1e6]})
    assert row_names(configs_table, CONFIGS) == ["000000000"]
    assert candidates(configs_table, CONFIGS)[0].size == 0.0  # no size: exact ties all stay
    assert candidates(configs_table, SIZED_CONFIGS)[0].size == 1e6


# ----------------------------------------------------------------------------------------------
# the budget and the champion
# ----------------------------------------------------------------------------------------------


def configs(*rows: tuple[str, float, float, float, float]) -> pd.DataFrame:
    """(config, metric_mean, latency_ms (mean), best_latency_ms, best_speedup) rows, index from 10."""
    frame = pd.DataFrame(rows, columns=["config", "metric_mean", "latency_ms", "best_latency_ms", "best_speedup"])
    frame.index = range(10, 10 + len(frame))
    return frame


def test_within_budget_reads_the_best_seeds_figures():
    frame = configs(("a", 0.9, 9.0, 4.0, 2.5), ("b", 0.9, 1.0, 5.0, 2.0), ("c", 0.9, 1.0, 5.01, 2.5),
                    ("d", 0.9, 1.0, NAN, 3.0), ("e", 0.9, 1.0, 3.0, NAN))
    assert within_budget(frame, BOTH).to_dict() == {10: True, 11: True, 12: False, 13: False, 14: False}
    assert within_budget(frame, SelectionConfig()).to_dict() == {10: True, 11: True, 12: True, 13: False, 14: True}


def test_choose_champion_takes_the_best_mean_within_budget_ties_to_the_faster():
    frame = configs(("best-but-slow", 0.95, 4.0, 6.0, 3.0), ("tie-slower", 0.90, 4.5, 4.0, 3.0),
                    ("tie-faster", 0.90, 4.2, 4.9, 2.1), ("worse", 0.80, 1.0, 1.0, 9.0))
    assert choose_champion(frame, SelectionConfig())["config"] == "best-but-slow"
    assert choose_champion(frame, BOTH)["config"] == "tie-faster"  # ties go by mean latency, not the best seed's
    assert choose_champion(frame, SelectionConfig(min_speedup=2.5))["config"] == "best-but-slow"
    assert choose_champion(frame, SelectionConfig(max_latency_ms=0.5)) is None
    assert choose_champion(frame.iloc[:0], BOTH) is None


def test_exact_ties_group_one_point_each_and_choose_as_the_champion_rule_does():
    frame = configs(("a", 0.80, 4.0, 4.0, 2.0), ("b", 0.90, 6.0, 6.0, 1.5), ("c", 0.80, 4.0, 4.0, 2.0),
                    ("d", 0.80, 4.0, 4.0, 2.0), ("e", 0.80, 4.000001, 4.0, 2.0), ("f", 0.80, 4.0, 4.5, 2.0))
    groups = exact_ties(frame)
    # a latency a millionth apart is another point; so is one whose served seed the budget judges
    # on other figures (`selection.latency.all_seeds`: the mean and the served export's differ)
    assert [(first["config"], list(tied["config"])) for first, tied in groups] == [
        ("a", ["c", "d"]), ("b", []), ("e", []), ("f", [])]
    # with sizes, a tie needs the same size too; the rule then takes the first in the table's order
    sized = frame.assign(num_params=[5, 1, 5, 3, 1, 5])
    assert [(f["config"], list(t["config"])) for f, t in exact_ties(sized, SIZED_CONFIGS)] == [
        ("a", ["c"]), ("b", []), ("d", []), ("e", []), ("f", [])]
    assert exact_ties(frame.iloc[:0]) == []


# ----------------------------------------------------------------------------------------------
# the selection travels whole
# ----------------------------------------------------------------------------------------------

BUDGET_FIELDS = {"size_objective", "max_latency_ms", "min_speedup"}
# the rule over `Candidate`s itself, whose one switch is whether size is an objective
CANDIDATE_RULES = {"SelectionConfig", "front_mask", "complete"}


def unpacked_budgets(source: str, where: str) -> list[str]:
    """Calls that pass a budget field as a keyword to anything but `SelectionConfig` itself (or
    the rule over candidates, `CANDIDATE_RULES`): the objectives and limits go from the spec to the
    front, the champion and the registry as one `SelectionConfig`, so no call site picks some of
    them and forgets another."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and (names := sorted(k.arg for k in node.keywords if k.arg in BUDGET_FIELDS)):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "?")
            if callee not in CANDIDATE_RULES:
                found.append(f"{where}:{node.lineno} {callee}({', '.join(names)})")
    return found


def test_no_call_in_pipeline_unpacks_the_budget():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    found = [hit for path in sorted((root / "pipeline").rglob("*.py"))
             for hit in unpacked_budgets(path.read_text(), str(path.relative_to(root)))]
    assert found == []


def test_an_unpacked_budget_is_found():
    source = ("variant_front(t, size_objective=s.size_objective, max_latency_ms=s.max_latency_ms)\n"
              "variants.stack_summary(t, min_speedup=2.0)\nSelectionConfig(max_latency_ms=3.0)\nvariant_front(t, s)\n"
              "front_mask(cands, size_objective=True)\n")
    assert unpacked_budgets(source, "x.py") == ["x.py:1 variant_front(max_latency_ms, size_objective)",
                                                "x.py:2 stack_summary(min_speedup)"]
