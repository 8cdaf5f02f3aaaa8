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
    before = list(sys.path)
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_search_tuning", BENCHMARKS / "search_tuning.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = before  # the script adds its folder too
    return module


def test_a_setting_replaces_drydocks_own_and_keeps_the_rest():
    tuning = load_script()
    tpe = tuning.tuned_sampler({"n_ei_candidates": 96, "gamma_fraction": 0.25})("motpe", 3, 40)
    assert isinstance(tpe, optuna.samplers.TPESampler)
    assert (tpe._n_ei_candidates, tpe._n_startup_trials, tpe._gamma(20), tpe._gamma(200)) == (96, 10, 5, 25)
    assert tpe._parzen_estimator_parameters.multivariate and tpe._group_decomposed_search_space is not None
    assert tuning.tuned_sampler({"n_startup_trials": 5})("tpe", 0, 40)._n_startup_trials == 5
    nsga2, own = tuning.tuned_sampler({"crossover_prob": 0.5})("nsga2", 0, 40), study.sampler("nsga2", 0, 40)
    assert (nsga2.population_size, nsga2._child_generation_strategy._mutation_prob) == (
        own.population_size, own._child_generation_strategy._mutation_prob)  # drydock's own, read from its sampler
    assert nsga2._child_generation_strategy._crossover_prob == 0.5
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


def test_each_depth_encoding_reaches_the_study_and_drydocks_own_comes_back(tmp_path, capsys):
    from pipeline.search import joint_space
    from pipeline.search.joint_space import suggest_configuration

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from test_benchmark_search_efficiency import synthetic_table
    finally:
        sys.path.pop(0)
    table = synthetic_table()
    tuning = load_script()
    with tuning.depth_encoding("shared"):
        spec = tuning.bench.replay_spec(table, "motpe", 4, 0)
        trial = optuna.create_study(directions=["maximize", "minimize"]).ask()
        suggest_configuration(trial, spec)
        assert "num_layers" in trial.params and "kd.num_layers" not in trial.params
    with tuning.depth_encoding("ordinal"):
        spec = tuning.bench.replay_spec(table, "motpe", 4, 0)
        trial = optuna.create_study(directions=["maximize", "minimize"]).ask()
        suggest_configuration(trial, spec)
        assert isinstance(trial.distributions["kd.num_layers"], optuna.distributions.IntDistribution)
    assert joint_space.param_name("kd", "num_layers") == "kd.num_layers"
    assert tuning.bench.replay_spec is tuning.TABLE_SPEC
    table.to_parquet(tmp_path / "timed.parquet")
    assert tuning.main(["--table", str(tmp_path / "timed.parquet"), "--repeats", "2", "--algorithms", "random",
                        "--depth", "ordinal", "--settings", "{}", '{"n_startup_trials": 5}']) == 0
    assert study.sampler is tuning.DRYDOCK_SAMPLER and tuning.bench.replay_spec is tuning.TABLE_SPEC
    found = [line for line in capsys.readouterr().out.splitlines() if "searches:" in line]
    assert len(found) == 2 and all("random hypervolume after 20" in line for line in found)
