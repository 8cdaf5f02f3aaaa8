"""The report's Search section, from the search.json a searching sweep leaves in its run folder."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pipeline.select.search_section import final_latencies, rank_agreement, search_section, section_markdown

SUMMARY = {
    "algorithm": "motpe", "objectives": ["metric", "latency"], "budget": 6, "reference": [0.0, 20.0],
    "configurations": [
        {"config_id": "aaaa", "order": 1, "told_rank": 1, "method": "kd", "told": "complete", "metric": 0.8, "latency_ms": 4.0},
        {"config_id": "bbbb", "order": 2, "told_rank": 2, "method": "kd", "told": "complete", "metric": 0.7, "latency_ms": 2.0},
        {"config_id": "cccc", "order": 3, "told_rank": 3, "method": "kd", "told": "pruned", "metric": None, "latency_ms": None},
        {"config_id": "dddd", "order": 4, "told_rank": 4, "method": "kd", "told": "complete", "metric": 0.6, "latency_ms": 9.0},
    ],
    "hypervolume": [12.8, 14.2, 14.2, 14.2],
    "importances": {"kd": {"kd.num_layers": 0.9, "kd.alpha": 0.1}},
}


def _frame(latencies: dict[str, list[float | None]]) -> pd.DataFrame:
    if not latencies:
        return pd.DataFrame(columns=["trial_id", "method", "latency_ms"])
    rows = [{"trial_id": f"kd-{cid}-s{seed}", "method": "kd", "latency_ms": lat}
            for cid, lats in latencies.items() for seed, lat in enumerate(lats)]
    return pd.DataFrame(rows)


def test_final_latencies_are_each_configurations_mean_over_the_seeds_timed():
    frame = _frame({"aaaa": [5.0, 7.0], "bbbb": [3.0, None]})
    assert final_latencies(frame) == {"aaaa": 6.0, "bbbb": 3.0}


def test_the_rank_agreement_is_spearman_over_configurations_both_timed():
    same_order = _frame({"aaaa": [5.0], "bbbb": [3.0], "dddd": [11.0]})
    assert rank_agreement(SUMMARY, same_order) == (pytest.approx(1.0), 3)
    reversed_ = _frame({"aaaa": [5.0], "bbbb": [11.0], "dddd": [3.0]})
    assert rank_agreement(SUMMARY, reversed_)[0] == pytest.approx(-1.0)  # ranks (2,1,3) against (2,3,1): Σd² = 8
    assert rank_agreement(SUMMARY, _frame({"aaaa": [5.0]})) is None  # too few to rank


def test_the_section_says_how_the_search_went_and_draws_its_hypervolume(tmp_path):
    assert search_section(tmp_path, _frame({})) is None  # a grid sweep: no section
    (tmp_path / "search.json").write_text(json.dumps(SUMMARY))
    section = search_section(tmp_path, _frame({"aaaa": [5.0], "bbbb": [3.0], "dddd": [11.0]}))
    assert section.lines == [
        "**motpe**, aiming at metric and latency: 4 of 6 configurations told (3 complete, 1 pruned by ASHA, 0 failed).",
        "Hypervolume of the front after 4 configurations: 14.2 (reference: metric 0, the teacher's 20 ms as the search timed it).",
        "Search-time latencies against the select stage's: Spearman ρ = 1.00 over 3 configurations timed by both.",
    ]
    assert section.plot.stat().st_size > 0
    assert section.importances.to_dict("records") == [{"method": "kd", "parameter": "num_layers", "importance": 0.9},
                                                      {"method": "kd", "parameter": "alpha", "importance": 0.1}]
    assert "![hypervolume per configuration](search.png)" in section_markdown(section, "")


def test_a_plugin_method_with_a_dash_in_its_name_keeps_its_configuration_ids():
    frame = pd.DataFrame([{"trial_id": "my-kd-aaaa-s0", "method": "my-kd", "latency_ms": 2.0}])
    assert final_latencies(frame) == {"aaaa": 2.0}


def test_equal_latencies_have_no_ranking_and_an_unreadable_summary_costs_only_the_section(tmp_path):
    equal = _frame({"aaaa": [5.0], "bbbb": [5.0], "dddd": [5.0]})
    assert rank_agreement(SUMMARY, equal) is None  # Spearman of a constant is undefined, not "nan"
    (tmp_path / "search.json").write_text('{"algorithm": "motpe"')
    assert search_section(tmp_path, equal) is None


def test_with_variants_the_search_is_ranked_against_each_configurations_fastest_runtime():
    # the search timed the fastest of selection.runtimes: the select stage's eager figures would
    # rank it against another runtime than it measured
    eager_reversed = _frame({"aaaa": [5.0], "bbbb": [11.0], "dddd": [3.0]})
    rows = [("teacher", "torch", 20.0, None), ("teacher", "onnxruntime-int8", 1.0, None),
            ("kd-aaaa-s0", "torch", 5.0, None), ("kd-aaaa-s0", "onnxruntime-int8", 2.5, None),
            ("kd-bbbb-s0", "torch", 11.0, None), ("kd-bbbb-s0", "onnxruntime-int8", 1.5, None),
            ("kd-dddd-s0", "torch", 3.0, None), ("kd-dddd-s0", "onnxruntime-int8", 0.5, "RuntimeError: broke")]
    variants = pd.DataFrame(rows, columns=["trial_id", "runtime", "latency_ms", "error"])
    assert final_latencies(eager_reversed, variants) == {"aaaa": 2.5, "bbbb": 1.5, "dddd": 3.0}  # dddd's int8 failed
    assert rank_agreement(SUMMARY, eager_reversed)[0] == pytest.approx(-1.0)
    assert rank_agreement(SUMMARY, eager_reversed, variants) == (pytest.approx(1.0), 3)
