"""benchmarks/search_efficiency.py replays the sweep's own searcher over a table of results."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path

import numpy as np
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
                     "teacher_metric": 0.85, "teacher_latency_ms": 12.0, "teacher_int8_ms": 6.0, "majority_metric": 0.5})
    return pd.DataFrame(rows)


def test_a_replay_looks_up_every_seed_runs_no_configuration_twice_and_finds_at_most_the_tables_front():
    bench = load_script()
    table = synthetic_table()
    best_possible = bench.hypervolume(list(zip(table["metric"], table["latency_ms"], strict=True)), (0.5, 12.0))
    for algorithm in ("random", "motpe"):
        rows = bench.replay(table, algorithm, seed=0, budget=20)
        assert [r["budget"] for r in rows] == list(range(1, 21))  # after each configuration told
        hv = [r["hypervolume"] for r in rows]
        assert 0 < hv[0] and all(a <= b for a, b in itertools.pairwise(hv)) and hv[-1] <= best_possible + 1e-12
        assert rows[-1]["best_metric"] <= table["metric"].max()
    # every configuration of the table told once: a budget of 20 × 2 seeds is all the table has
    full = bench.replay(table, "random", seed=1, budget=20)
    assert full[-1]["hypervolume"] == pytest.approx(best_possible)
    assert full[-1]["best_metric"] == pytest.approx(table["metric"].max())
    assert full[-1]["fastest_close_ms"] != full[-1]["fastest_close_ms"]  # nothing within 1 point of 0.85: NaN
    assert full[-1]["fastest_close"] is None


def test_the_fastest_configuration_within_a_point_of_the_teacher_and_its_speedup_over_the_teachers_int8():
    bench = load_script()
    table = synthetic_table()
    table["teacher_metric"] = 0.80  # within 1 point: metric >= 0.79, i.e. depth 4 with alpha 0.3-0.7 (0.78 + ...)
    close = table[table["metric"] >= 0.79]
    assert len(close) and close["latency_ms"].min() == 8.0  # only depth 4 (2 ms a layer) comes that close
    full = bench.replay(table, "random", seed=1, budget=20)[-1]
    assert full["fastest_close_ms"] == 8.0 and full["fastest_close_vs_teacher_int8"] == pytest.approx(6.0 / 8.0)
    assert json.loads(full["fastest_close"])["kd.num_layers"] == 4


def test_the_summary_gives_medians_and_interquartile_ranges_per_algorithm_and_budget():
    bench = load_script()
    runs = pd.DataFrame([{"algorithm": "random", "seed": s, "budget": k, "hypervolume": float(s) * k / 10,
                          "best_metric": 0.5 + s / 100, "fastest_close_ms": 3.0 if s < 3 else float("nan"),
                          "fastest_close": '{"method": "kd"}' if s < 3 else None,
                          "fastest_close_vs_teacher_int8": 2.0 if s < 3 else float("nan")}
                         for s in range(5) for k in range(1, 41)])
    summary = bench.summarize(runs)
    assert list(summary["budget"]) == [10, 20, 40]  # the curve's other points are the plot's
    first = summary.iloc[0]
    assert (first["hypervolume"], first["hypervolume_iqr"]) == (2.0, "1-3")
    assert (first["best_metric"], first["best_metric_iqr"]) == (0.52, "0.51-0.53")
    assert (first["found_close"], first["searches"], first["vs_teacher_int8"]) == (3, 5, 2.0)
    assert first["fastest_close"] == '{"method": "kd"}'


def test_the_verdicts_compare_20_configurations_with_random_searchs_40():
    bench = load_script()
    summary = pd.DataFrame([
        {"algorithm": "random", "budget": 40, "hypervolume": 1.0, "best_metric": 0.80},
        {"algorithm": "motpe", "budget": 20, "hypervolume": 1.2, "best_metric": 0.79},
        {"algorithm": "nsga2", "budget": 20, "hypervolume": 0.9, "best_metric": 0.79},
        {"algorithm": "tpe", "budget": 20, "hypervolume": 0.5, "best_metric": 0.80},
    ])
    assert bench.verdicts(summary) == [
        "motpe after 20: median hypervolume 1.2; random after 40: 1 (meets the bar)",
        "nsga2 after 20: median hypervolume 0.9; random after 40: 1 (misses the bar)",
        "tpe after 20: median best_metric 0.8; random after 40: 0.8 (meets the bar)",
    ]


def test_configurations_to_reach_a_fraction_of_the_whole_hypervolume_per_search():
    bench = load_script()
    table = synthetic_table()
    # the front: the best alpha (0.5) at each depth; reference (0.5, 12 ms)
    assert bench.whole_hypervolume(table) == pytest.approx(0.15 * 10 + 0.05 * 8 + 0.05 * 6 + 0.05 * 4)
    # a replay that told every configuration ends on the same front, measured from the same corner
    assert bench.replay(table, "random", seed=1, budget=20)[-1]["hypervolume"] == pytest.approx(bench.whole_hypervolume(table))
    curves = {0: [10, 20, 95, 99], 1: [50, 98, 98, 98], 2: [10, 10, 10, 10]}  # per search, after 1-4 configurations
    runs = pd.DataFrame([{"algorithm": "random", "seed": seed, "budget": k + 1, "hypervolume": hv}
                         for seed, curve in curves.items() for k, hv in enumerate(curve)])
    got = bench.reach(runs, 100.0, (0.98, 0.99)).set_index("fraction")
    assert list(got.loc[0.98, ["median", "q1", "q3", "never"]]) == [4, 2, 4, 1]  # needed 4, 2 and never
    assert list(got.loc[0.99, ["median", "q1", "q3", "never"]]) == [np.inf, 4, np.inf, 2]


def test_replay_from_the_command_line_prints_the_summary_and_verdicts_and_draws_the_curves(tmp_path, capsys):
    bench = load_script()
    table = tmp_path / "table.parquet"
    synthetic_table().to_parquet(table, index=False)
    assert bench.main(["replay", "--table", str(table), "--repeats", "2", "--algorithms", "random", "tpe",
                       "--out", str(tmp_path / "runs.parquet"), "--plot", str(tmp_path / "hv.png")]) == 0
    out = capsys.readouterr().out
    assert "20 configurations in the table; 2 searches per algorithm" in out
    assert "tpe after 20: median best_metric" in out
    assert "configurations to reach a fraction of the table's whole hypervolume (2.4)" in out
    runs = pd.read_parquet(tmp_path / "runs.parquet")
    assert sorted(runs["budget"].unique()) == list(range(1, 41)) and len(runs) == 2 * 2 * 40
    assert (tmp_path / "hv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_collect_keeps_configurations_with_every_seed_and_time_table_times_each_architecture_once(tmp_path):
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
    assert bench.collect(spec, sweep, tmp_path).empty  # no trial recorded yet
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
    table = bench.collect(spec, sweep, teacher)
    assert len(table) == 3 and "latency_ms" not in table
    first = table.iloc[0]
    assert json.loads(first["params"]) == {"method": "kd", "kd.num_layers": 1, "kd.alpha": 0.3}
    assert list(first["seed_metrics"]) == pytest.approx([0.6, 0.61]) and first["metric"] == pytest.approx(0.605)
    assert json.loads(first["student_config"])["num_hidden_layers"] == 1
    assert json.loads(first["teacher_config"])["num_hidden_layers"] == 4
    assert table["teacher_digest"].nunique() == 1 and len(first["teacher_digest"]) == 16
    assert table["architecture"].nunique() == 2  # depth 1 and 2; the weights do not enter it

    settings = LatencyConfig(batch_size=4, seq_length=16, shapes=["4x16"], min_runs=3, min_seconds=0.1, warmup=1)
    timed = bench.time_table(table, settings, majority_metric=0.5)
    by_depth = timed.groupby(timed["params"].map(lambda p: json.loads(p)["kd.num_layers"]))["latency_ms"].nunique()
    assert (by_depth == 1).all()  # one timing per architecture
    assert timed["teacher_latency_ms"].nunique() == 1 and timed["majority_metric"].eq(0.5).all()
    for _, row in timed.iterrows():  # the search's latency: the fastest runtime of the quickstart's two
        by_runtime = json.loads(row["latency_by_runtime"])
        assert set(by_runtime) == {"torch", "onnxruntime-int8"} and row["latency_ms"] == min(by_runtime.values())
    assert timed["teacher_int8_ms"].nunique() == 1 and timed["teacher_int8_ms"].iloc[0] > 0
    assert bench.replay_spec(timed, "tpe", 2, 0).methods["kd"].domains()["num_layers"].grid == [1, 2]


def test_a_random_copy_of_a_pruned_student_has_its_shapes_and_loads_as_an_export(tmp_path):
    from pipeline.measure.engines import load_model
    from pipeline.search.search_latency import architecture

    config = {"model_type": "drydock_pruned_bert", "vocab_size": 100, "hidden_size": 24, "pooler_size": 32,
              "attention_head_size": 8, "layer_heads": [2, 0], "layer_intermediate": [16, 5],
              "max_position_embeddings": 64, "num_labels": 2}
    bench = load_script()
    folder = bench.random_copy(json.dumps(config), tmp_path / "copy")
    layers = load_model(folder).bert.encoder.layer
    assert [layer.attention is None for layer in layers] == [False, True]
    assert [layer.intermediate.dense.out_features for layer in layers] == [16, 5]
    assert architecture(folder) == architecture(bench.random_copy(json.dumps(config), tmp_path / "again"))


def test_a_shard_is_one_method_at_the_sizes_whose_configurations_the_table_lacks():
    bench = load_script()
    raw = {"name": "se", "task": {"name": "sst2", "glue_dir": "${GLUE_DIR:-}"}, "methods": {
        "kd": {"num_layers": {"grid": [1, 2, 3]}, "alpha": {"grid": [0.3, 0.9]}, "temperature": 2.0},
        "cofi": {"target_sparsity": {"grid": [0.5, 0.9]}}}}
    shard = bench.shard_spec(raw, "kd", None)
    assert shard["name"].startswith("se-kd-") and list(shard["methods"]) == ["kd"] and shard["task"]["glue_dir"] == "${GLUE_DIR:-}"
    held = pd.DataFrame([{"method": "kd", "config_id": f"{d}-{a}",
                          "params": json.dumps({"method": "kd", "kd.num_layers": d, "kd.alpha": a})}
                         for d, a in [(1, 0.3), (1, 0.9), (2, 0.3)]])
    cut = bench.shard_spec(raw, "kd", held)
    assert cut["methods"]["kd"] == {  # depth 2 has one of its two: it runs again
        "num_layers": {"grid": [2, 3]}, "alpha": {"grid": [0.3, 0.9]}, "temperature": 2.0}
    assert cut["name"] != shard["name"] and cut["name"] == bench.shard_spec(raw, "kd", held)["name"]  # its own sweep
    assert bench.shard_spec(raw, "cofi", held)["methods"]["cofi"]["target_sparsity"]["grid"] == [0.5, 0.9]
    whole = pd.concat([held, pd.DataFrame([{"method": "kd", "config_id": f"{d}-{a}", "params": json.dumps(
        {"method": "kd", "kd.num_layers": d, "kd.alpha": a})} for d, a in [(2, 0.9), (3, 0.3), (3, 0.9)]])])
    assert bench.shard_spec(raw, "kd", whole) is None
    again = bench.merge(held, whole.assign(metric=1.0))  # a configuration measured twice keeps its first row
    assert list(again["config_id"]) == list(whole["config_id"]) and again["metric"].isna().sum() == 3
    with pytest.raises(SystemExit, match="is not the table's"):  # another session's teacher, not the same model
        bench.merge(held.assign(teacher_digest="aaaa"), whole.assign(teacher_digest="bbbb"))
    with pytest.raises(SystemExit, match=r"weights bbbb\) is not the table's \(aaaa, nan\)"):  # rows from before digests
        bench.merge(held.assign(teacher_digest=["aaaa", None, "aaaa"]), whole.assign(teacher_digest="bbbb"))


def test_a_grid_point_the_table_lacks_is_told_failed_not_a_crash():
    bench = load_script()
    table = synthetic_table().iloc[1:]  # a configuration the collected sweep dropped (a seed missing)
    rows = bench.replay(table, "random", seed=1, budget=20)
    assert rows[-1]["best_metric"] == pytest.approx(table["metric"].max())
