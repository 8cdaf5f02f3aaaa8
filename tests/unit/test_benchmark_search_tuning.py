"""benchmarks/search_tuning.py replays the table with one sampler setting changed at a time."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import optuna
import pandas as pd

from pipeline.search import study

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_search_tuning", BENCHMARKS / "search_tuning.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_a_setting_replaces_drydocks_own_and_keeps_the_rest():
    tuning = load_script()
    tpe = tuning.tuned_sampler({"n_ei_candidates": 96, "gamma_fraction": 0.25})("motpe", 3, 40)
    assert isinstance(tpe, optuna.samplers.TPESampler)
    assert (tpe._n_ei_candidates, tpe._n_startup_trials, tpe._gamma(20), tpe._gamma(200)) == (96, 10, 5, 25)
    assert tpe._parzen_estimator_parameters.multivariate and tpe._group_decomposed_search_space is not None
    assert tuning.tuned_sampler({"n_startup_trials": 5})("tpe", 0, 40)._n_startup_trials == 5
    nsga2 = tuning.tuned_sampler({})("nsga2", 0, 40)
    assert (nsga2.population_size, nsga2._child_generation_strategy._mutation_prob) == (10, 0.1)
    assert isinstance(tuning.tuned_sampler({"n_startup_trials": 5})("random", 0, 40), optuna.samplers.RandomSampler)
    assert study.sampler is tuning.DRYDOCK_SAMPLER  # loading the script patches nothing


def test_ordinal_depths_are_a_randint_over_the_tables_depths():
    tuning = load_script()
    table = pd.DataFrame([{"method": "kd", "params": json.dumps({"method": "kd", "kd.num_layers": d, "kd.alpha": a}),
                           "seed_metrics": [0.7, 0.7]} for d in (1, 2, 3) for a in (0.3, 0.6)])
    spec = tuning.ordinal_spec(table, "motpe", 4, 0)
    domains = spec.methods["kd"].domains()
    assert (domains["num_layers"].low, domains["num_layers"].high) == (1, 4)
    assert list(domains["alpha"].argument) == [0.3, 0.6]


def test_each_depth_encoding_replays_from_the_command_line_and_leaves_drydocks_own_in_place(tmp_path, capsys):
    from pipeline.search import joint_space

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from test_benchmark_search_efficiency import synthetic_table
    finally:
        sys.path.pop(0)
    synthetic_table().to_parquet(tmp_path / "timed.parquet")
    tuning = load_script()
    for depth in ("ordinal", "shared", "per-method"):
        assert tuning.main(["--table", str(tmp_path / "timed.parquet"), "--repeats", "2", "--algorithms", "random",
                            "--depth", depth, "--settings", "{}"]) == 0
        assert study.sampler is tuning.DRYDOCK_SAMPLER and joint_space.param_name("kd", "num_layers") == "kd.num_layers"
    lines = capsys.readouterr().out.splitlines()
    found = [line.split(": ", 1)[1] for line in lines if "searches:" in line]
    assert len(found) == 3 and len(set(found)) == 1  # one method, every depth seen: the encodings agree on random search
    assert "random hypervolume after 20" in found[0]
