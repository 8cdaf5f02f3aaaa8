"""The champion policy on plain values: the budget check and its words, and when the alias
moves (the choice among configurations: tests/unit/select/test_front.py)."""

from __future__ import annotations

import math

import pytest

from pipeline.config import SelectionConfig
from pipeline.select.champion import (
    CHAMPION,
    ChampionDecision,
    beats_champion,
    budget_breaches,
    budget_text,
    champion_rule,
    decide,
    decide_without_candidate,
    outside_budget,
    tag_number,
)

NAN = math.nan
BOTH = SelectionConfig(max_latency_ms=5.0, min_speedup=2.0)


def test_the_alias_has_one_name_and_the_registry_uses_it():
    from pipeline.select import registry

    assert CHAMPION == "champion" and registry.CHAMPION is CHAMPION


# ----------------------------------------------------------------------------------------------
# the budget
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("latency,speedup,broken", [
    (5.0, 2.0, []),  # at the budget: within
    (4.99, 2.01, []),
    (5.01, 2.0, ["latency 5.01 ms > 5 ms"]),  # just over
    (5.0, 1.99, ["speedup 1.99× < 2×"]),  # just under
    (8.0, 1.5, ["latency 8.00 ms > 5 ms", "speedup 1.50× < 2×"]),
    (4.0, NAN, ["speedup not measured"]),  # a candidate must show its speedup
    (NAN, 3.0, ["latency not measured"]),
    (None, None, ["latency not measured", "speedup not measured"]),
])
def test_a_candidate_breaks_the_budget_where_a_figure_is_over_or_missing(latency, speedup, broken):
    assert budget_breaches(latency, speedup, BOTH, unknown_breaks=True) == broken


def test_a_recorded_champion_is_not_judged_on_a_missing_figure():
    assert budget_breaches(4.0, NAN, BOTH, unknown_breaks=False) == []
    assert budget_breaches(None, 1.5, BOTH, unknown_breaks=False) == ["speedup 1.50× < 2×"]
    assert budget_breaches(9.0, None, BOTH, unknown_breaks=False) == ["latency 9.00 ms > 5 ms"]


def test_without_a_budget_only_a_candidates_missing_latency_counts():
    for budget in (None, SelectionConfig()):
        assert budget_breaches(1000.0, 0.01, budget, unknown_breaks=True) == []
        assert budget_breaches(1000.0, NAN, budget, unknown_breaks=True) == []  # no speedup asked for
        assert budget_breaches(NAN, NAN, budget, unknown_breaks=True) == ["latency not measured"]
        assert budget_breaches(NAN, NAN, budget, unknown_breaks=False) == []


def test_the_budget_in_words():
    assert budget_text(SelectionConfig()) is None
    assert budget_text(SelectionConfig(max_latency_ms=2.5)) == "latency ≤ 2.5 ms"
    assert budget_text(SelectionConfig(min_speedup=3.0)) == "speedup ≥ 3×"
    assert budget_text(BOTH) == "latency ≤ 5 ms and speedup ≥ 2×"
    assert champion_rule(SelectionConfig()) == "best mean metric on the front (no latency budget)"
    assert champion_rule(BOTH) == "best mean metric on the front whose registered seed is within latency ≤ 5 ms and speedup ≥ 2×"


# ----------------------------------------------------------------------------------------------
# the alias, on registry tags
# ----------------------------------------------------------------------------------------------

CURRENT = {"metric_name": "accuracy", "metric": "0.90", "latency_ms": "8.0", "speedup": "1.5"}
CANDIDATE = {"metric_name": "accuracy", "metric": "0.80", "latency_ms": "3.0", "speedup": "4.0"}


def test_tags_are_read_as_numbers_or_nan():
    assert tag_number("0.25") == 0.25 and tag_number("3") == 3.0
    assert math.isnan(tag_number(None)) and math.isnan(tag_number("fast"))


def test_outside_budget_on_recorded_figures():
    assert outside_budget(CURRENT, BOTH) == "latency 8.00 ms > 5 ms and speedup 1.50× < 2×"
    assert outside_budget(CURRENT, SelectionConfig(max_latency_ms=8.0)) is None  # on the limit: within
    assert outside_budget(CURRENT, None) is None
    assert outside_budget({"latency_ms": "n/a"}, BOTH) is None  # nothing recorded: nothing to judge


def test_beats_champion_on_metric_and_budget():
    assert beats_champion(CANDIDATE, None) == (True, "no champion yet")
    assert beats_champion(CANDIDATE, CURRENT) == (False, "accuracy 0.8000 does not beat the champion's 0.9000")
    assert beats_champion(CURRENT, CANDIDATE) == (True, "accuracy 0.9000 beats the champion's 0.8000")
    assert beats_champion(CANDIDATE, {**CANDIDATE, "metric": "0.80"}) == (False, "accuracy 0.8000 does not beat the champion's 0.8000")
    assert beats_champion(CANDIDATE, CURRENT, SelectionConfig(max_latency_ms=5.0)) == (
        True, "the champion is outside this sweep's latency budget (latency 8.00 ms > 5 ms)")
    assert beats_champion(CANDIDATE, {"metric_name": "accuracy"}) == (True, "the champion has no recorded metric")
    moved, reason = beats_champion(CANDIDATE, {**CURRENT, "metric_name": "f1"}, SelectionConfig(max_latency_ms=5.0))
    assert not moved and reason.startswith("the champion is scored by 'f1' and this candidate by 'accuracy'")


def test_beats_champion_checks_the_champion_against_the_current_budget():
    champion = {"metric_name": "accuracy", "metric": "0.90", "latency_ms": "8.0", "speedup": "1.5"}
    candidate = {"metric_name": "accuracy", "metric": "0.80", "latency_ms": "3.0", "speedup": "4.0"}
    assert beats_champion(candidate, champion) == (False, "accuracy 0.8000 does not beat the champion's 0.9000")
    assert beats_champion(candidate, champion, SelectionConfig(max_latency_ms=8.0))[0] is False  # on the limit: within
    assert beats_champion(candidate, champion, SelectionConfig(min_speedup=2.0)) == (
        True, "the champion is outside this sweep's latency budget (speedup 1.50× < 2×)")
    assert beats_champion(candidate, {**champion, "metric_name": "f1"}, SelectionConfig(max_latency_ms=5.0))[0] is False
    no_latency = {"metric_name": "accuracy", "metric": "0.90"}  # nothing recorded: not judged on it
    assert beats_champion(candidate, no_latency, SelectionConfig(max_latency_ms=5.0))[0] is False


def test_decide_moves_the_alias_forward_only():
    assert decide("3", CANDIDATE, None, None) == ChampionDecision(True, "3", None, "no champion yet")
    assert decide("3", CANDIDATE, "3", CANDIDATE) == ChampionDecision(False, "3", "3", "already the champion")
    assert decide("3", CANDIDATE, "1", CURRENT) == ChampionDecision(
        False, "1", "1", "accuracy 0.8000 does not beat the champion's 0.9000")
    assert decide("3", CANDIDATE, "1", CURRENT, SelectionConfig(max_latency_ms=5.0)) == ChampionDecision(
        True, "3", "1", "the champion is outside this sweep's latency budget (latency 8.00 ms > 5 ms)")


def test_without_a_candidate_the_alias_stays_and_says_so_only_when_outside_the_budget():
    assert decide_without_candidate("2", CURRENT, SelectionConfig(max_latency_ms=2.0)) == ChampionDecision(
        False, "2", "2", "the champion is outside this sweep's latency budget (latency 8.00 ms > 2 ms), "
                         "but no configuration of this sweep meets it either")
    assert decide_without_candidate("2", CURRENT, SelectionConfig(max_latency_ms=8.0)) is None
    assert decide_without_candidate("2", CURRENT, None) is None
    assert decide_without_candidate(None, None, BOTH) is None


# ----------------------------------------------------------------------------------------------
# the same data (issue 21: a champion is judged on the challenger's dev set)
# ----------------------------------------------------------------------------------------------

EASY = {"eval_task": "sst2", "eval_labels": '["negative", "positive"]', "eval_data": "easy0000", "metric_name": "accuracy"}
HARD = {**EASY, "eval_data": "hard0000"}


def test_recorded_metrics_decide_only_on_the_same_rows():
    from pipeline.select.champion import needs_rescore

    assert not needs_rescore({**HARD, "metric": "0.8"}, {**HARD, "metric": "0.9"})
    assert needs_rescore({**HARD, "metric": "0.8"}, {**EASY, "metric": "0.9"})
    assert needs_rescore({**HARD, "metric": "0.8"}, {"metric_name": "accuracy", "metric": "0.9"})  # before data tags
    assert not needs_rescore({"metric_name": "accuracy", "metric": "0.8"}, {**EASY, "metric": "0.9"})  # nothing to judge on
    # the same rows: the recorded means decide, as before
    assert beats_champion({**HARD, "metric": "0.80"}, {**HARD, "metric": "0.90"}) == (
        False, "accuracy 0.8000 does not beat the champion's 0.9000")


def test_rescored_figures_decide_and_the_reason_names_the_data():
    from pipeline.select.champion import Rescored

    where = "sst2 dev, 12 examples, data hard0000"
    # 0.95 on an easy dev set is no argument against 0.80 on a harder one: on the same rows the
    # champion scores 0.25, so the challenger takes the alias (the recorded numbers alone refuse it)
    assert beats_champion({**HARD, "metric": "0.80"}, {**EASY, "metric": "0.95"})[0] is False
    move, reason = beats_champion({**HARD, "metric": "0.80"}, {**EASY, "metric": "0.95"}, None,
                                  Rescored(candidate=0.75, champion=0.25, data=where))
    assert move and reason == (f"accuracy 0.7500 beats the champion's 0.2500 on this sweep's dev set ({where}); "
                               "it recorded 0.9500 on other data")
    # and a champion recorded low on a hard set, which beats the challenger on its set, stays
    move, reason = beats_champion({**EASY, "metric": "0.99"}, {**HARD, "metric": "0.60"}, None,
                                  Rescored(candidate=0.75, champion=0.75, data=where))
    assert not move and reason.startswith("accuracy 0.7500 does not beat the champion's 0.7500 on this sweep's dev set")
    decision = decide("5", {**HARD, "metric": "0.8"}, "3", {**EASY, "metric": "0.95"}, None, Rescored(0.75, 0.25, where))
    assert (decision.moved, decision.version, decision.previous) == (True, "5", "3")


def test_another_task_or_label_set_never_competes():
    from pipeline.select.champion import Rescored, incomparable

    other_task = {**EASY, "eval_task": "imdb", "metric": "0.50"}
    move, reason = beats_champion({**HARD, "metric": "0.99"}, other_task, None, Rescored(0.99, 0.1, "x"))
    assert not move and reason == ("the champion was trained for the task imdb and this candidate for sst2: "
                                   "another task never competes, promote by hand if intended")
    other_labels = {**EASY, "eval_labels": '["neg", "pos"]', "metric": "0.50"}
    assert incomparable({**HARD}, other_labels) == (
        'the champion was trained for the label set ["neg", "pos"] and this candidate for ["negative", "positive"]: '
        "another label set never competes, promote by hand if intended")
    # not even a champion outside the budget gives way to another task
    slow_other = {**other_task, "latency_ms": "9.0"}
    assert beats_champion({**HARD, "metric": "0.99"}, slow_other, SelectionConfig(max_latency_ms=5.0))[0] is False
    assert incomparable(HARD, {"metric_name": "accuracy"}) is None  # an untagged champion: re-scoring settles it


def test_a_champion_whose_rescore_is_not_a_number_gives_way():
    from pipeline.select.champion import Rescored

    move, reason = beats_champion({**HARD, "metric": "0.8"}, {**EASY, "metric": "0.9"}, None, Rescored(0.5, NAN, "d"))
    assert move and reason == "the champion's accuracy is not a number on this sweep's dev set (d); this candidate's is 0.5000"
    assert beats_champion({**HARD, "metric": "0.8"}, {**EASY, "metric": "0.9"}, None, Rescored(NAN, 0.5, "d"))[0] is False
