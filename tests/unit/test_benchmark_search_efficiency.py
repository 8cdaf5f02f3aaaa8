"""benchmarks/search_efficiency.py replays the sweep's own searcher over a table of results."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from methods import get_method
from pipeline.search.space import config_id

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "search_efficiency.py"


def load_script():
    spec = importlib.util.spec_from_file_location("benchmark_search_efficiency", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def synthetic_table() -> pd.DataFrame:
    """kd: depth 1-4 × 5 alphas; deeper is slower and better, alpha 0.5 best; two seeds each."""
    rows = []
    for depth, alpha in itertools.product((1, 2, 3, 4), (0.1, 0.3, 0.5, 0.7, 0.9)):
        params = get_method("kd").Params(num_layers=depth, alpha=alpha)
        metric = 0.6 + 0.05 * depth - 0.2 * abs(alpha - 0.5)
        rows.append({"config_id": config_id("kd", params), "method": "kd",
                     "params": json.dumps({"method": "kd", "kd.num_layers": depth, "kd.alpha": alpha}),
                     "seed_metrics": [metric - 0.01, metric + 0.01], "metric": metric, "latency_ms": 2.0 * depth,
                     "teacher_metric": 0.85, "teacher_latency_ms": 12.0, "majority_metric": 0.5})
    return pd.DataFrame(rows)


def test_a_replay_looks_up_every_seed_runs_no_configuration_twice_and_finds_at_most_the_tables_front():
    bench = load_script()
    table = synthetic_table()
    best_possible = bench.hypervolume(bench.front(list(zip(table["metric"], table["latency_ms"], strict=True))), (0.5, 12.0))
    for algorithm in ("random", "motpe"):
        rows = bench.replay(table, algorithm, seed=0, budget=20)
        assert [r["budget"] for r in rows] == [10, 20, 40]
        hv = [r["hypervolume"] for r in rows]
        assert 0 < hv[0] <= hv[1] == hv[2] <= best_possible + 1e-12  # 20 configurations at most: 40 finds no more
        assert rows[1]["best_metric"] <= table["metric"].max()
    # every configuration of the table told once: a budget of 20 × 2 seeds is all the table has
    full = bench.replay(table, "random", seed=1, budget=20)
    assert full[2]["hypervolume"] == pytest.approx(best_possible)
    assert full[2]["best_metric"] == pytest.approx(table["metric"].max())
    assert full[2]["fastest_close_ms"] != full[2]["fastest_close_ms"]  # nothing within 1 point of 0.85: NaN


def test_the_summary_gives_medians_and_interquartile_ranges_per_algorithm_and_budget():
    bench = load_script()
    runs = pd.DataFrame([{"algorithm": "random", "seed": s, "budget": 10, "hypervolume": float(s), "best_metric": 0.5,
                          "fastest_close_ms": 3.0} for s in range(5)])
    summary = bench.summarize(runs).iloc[0]
    assert (summary["hypervolume"], summary["hypervolume_iqr"]) == (2.0, "1-3")


def test_collect_makes_the_table_of_a_finished_grid_sweep_one_timing_per_architecture(tmp_path):
    from pipeline import results as results_table
    from pipeline.config import LatencyConfig, spec_from_dict
    from tests.conftest import make_tiny_bert

    bench = load_script()
    spec = spec_from_dict({
        "name": "bench", "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/unused"},
        "teacher": {"model": "bert-base-uncased"}, "seeds": [0, 1],
        "methods": {"kd": {"num_layers": {"grid": [1, 2]}, "alpha": {"grid": [0.3, 0.7]}}},
    })
    sweep = tmp_path / "bench"
    rows = []
    for n, (depth, alpha) in enumerate(itertools.product((1, 2), (0.3, 0.7))):
        cid = config_id("kd", get_method("kd").Params(num_layers=depth, alpha=alpha))
        for seed in (0, 1):
            if (depth, alpha, seed) == (2, 0.7, 1):
                continue  # a configuration with a seed missing is left out
            student = sweep / "trials" / f"kd-{cid}-s{seed}"
            make_tiny_bert(num_layers=depth, seed=seed).save_pretrained(student)
            rows.append(results_table.trial_row(f"kd-{cid}-s{seed}", "kd", seed, {"num_layers": depth, "alpha": alpha},
                                                "finished", {"metric": 0.6 + n / 10 + seed / 100, "teacher_metric": 0.9,
                                                             "student_path": str(student)}))
    results_table.upsert(sweep / "results.parquet", rows)
    teacher = tmp_path / "teacher"
    make_tiny_bert(num_layers=4).save_pretrained(teacher)
    settings = LatencyConfig(batch_size=4, seq_length=16, shapes=["4x16"], min_runs=3, min_seconds=0.1, warmup=1)
    table = bench.collect(spec, sweep, teacher, majority_metric=0.5, settings=settings)
    assert len(table) == 3
    first = table.iloc[0]
    assert json.loads(first["params"]) == {"method": "kd", "kd.num_layers": 1, "kd.alpha": 0.3}
    assert list(first["seed_metrics"]) == pytest.approx([0.6, 0.61]) and first["metric"] == pytest.approx(0.605)
    by_depth = table.groupby(table["params"].map(lambda p: json.loads(p)["kd.num_layers"]))["latency_ms"].nunique()
    assert (by_depth == 1).all()  # one timing per architecture
    assert table["teacher_latency_ms"].nunique() == 1 and table["majority_metric"].eq(0.5).all()
    assert bench.replay_spec(table, "tpe", 2, 0).methods["kd"].domains()["num_layers"].grid == [1, 2]


def test_a_grid_point_the_table_lacks_is_told_failed_not_a_crash():
    bench = load_script()
    table = synthetic_table().iloc[1:]  # a configuration the collected sweep dropped (a seed missing)
    rows = bench.replay(table, "random", seed=1, budget=20)
    assert rows[2]["best_metric"] == pytest.approx(table["metric"].max())
