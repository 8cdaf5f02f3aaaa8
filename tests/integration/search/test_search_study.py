"""A sweep whose configurations an Optuna study suggests (`search.algorithm: motpe`), through a
real local Ray: every configuration runs with all its seeds, and what the study was told agrees
with the results table (seed means, the latency the search measured, pruned where ASHA stopped)."""

from __future__ import annotations

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from pipeline.config import load_spec
from pipeline.workdir import config_id_of
from tests.integration.search.test_sweep import SMOKE

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def load_study(workdir, name: str) -> optuna.Study:
    journal = next((workdir / name).glob("runs/*/study.journal"))
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    return optuna.load_study(study_name=name, storage=storage)


def test_a_multi_objective_search_runs_each_configuration_on_every_seed_and_tells_the_study_what_the_table_says(
        ray_local, tmp_path):
    """MOTPE's first configurations are random draws of its seed: with `search.sample_seed: 0` they
    are (2 layers, lr 1e-7), then (2 layers, lr 1e-3) (tests/unit/search/test_study.py pins the
    draws). From the pretrained start, the tiny rate is at 0.555 after epoch 1 and 1e-3 at 0.445
    (test_sweep.py's ASHA test), so ASHA stops the second configuration's seeds at the first rung,
    mid-run (4 epochs), and the study must be told it was pruned, not a finished value."""
    from pipeline.sweep import run_sweep

    spec = load_spec(SMOKE, [
        "name=smoke-motpe", "tracking.experiment=smoke-motpe", "tracking.registered_model=smoke-motpe-student",
        "seeds=[0, 1]", "train.epochs=4", "search.scheduler=asha", "search.max_concurrent_trials=2",
        "search.algorithm=motpe", "search.num_configurations=2", "search.sample_seed=0",
        "methods={kd: {init_from: pretrained, num_layers: {randint: [1, 3]}, learning_rate: {choice: [1.0e-7, 1.0e-3]}}}",
    ])
    frame = run_sweep(spec, tmp_path)
    seen = frame[["trial_id", "seed", "suggestion", "status", "steps", "metric", "params.num_layers", "params.learning_rate"]].to_string()
    assert len(frame) == 4 and frame["trial_id"].is_unique, seen
    frame["config_id"] = [config_id_of(key, method) for key, method in zip(frame["trial_id"], frame["method"], strict=True)]
    by_config = frame.groupby("config_id")
    assert len(by_config) == 2, seen
    assert all(sorted(rows["seed"]) == [0, 1] for _, rows in by_config), seen  # paired: every seed of each
    assert sorted(by_config["suggestion"].first()) == [1, 2] and (by_config["suggestion"].nunique() == 1).all(), seen
    first, second = (rows for _, rows in sorted(by_config, key=lambda item: item[1]["suggestion"].iloc[0]))
    assert set(first["params.learning_rate"]) == {1.0e-7} and set(second["params.learning_rate"]) == {1.0e-3}, seen
    assert (first["status"] == "finished").all() and (second["status"] == "stopped").any(), seen
    assert (second.loc[second["status"] == "stopped", "steps"] < 64).all(), seen  # stopped mid-run, at the first rung

    study = load_study(tmp_path, "smoke-motpe")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    told = {t.user_attrs["config_id"]: t for t in study.trials if "config_id" in t.user_attrs}
    assert set(told) == set(by_config.groups), seen
    complete, pruned = told[first["config_id"].iloc[0]], told[second["config_id"].iloc[0]]
    assert complete.state == TrialState.COMPLETE and pruned.state == TrialState.PRUNED, seen
    assert complete.params["kd.num_layers"] == 2 and complete.values[0] == pytest.approx(first["metric"].mean()), seen
    assert complete.values[1] > 0  # the search-time latency of its architecture
    assert pruned.values is None  # no finished value: ASHA's stop is not a result
    assert pd.notna(frame["pareto"]).any()  # the select stage ran on the searched students
    report = (tmp_path / "smoke-motpe" / "report.md").read_text()
    assert "## Search" in report and "**motpe**, aiming at metric and latency: 2 of 2 configurations told" in report
    assert "(1 complete, 1 pruned by ASHA, 0 failed)" in report
    assert (tmp_path / "smoke-motpe" / "search.png").stat().st_size > 0  # published beside the report

    # a later sweep of the same task and teacher warm-starts from this one: its study holds this
    # sweep's complete configuration (the pruned one has no value to give) before its own
    warm = run_sweep(load_spec(SMOKE, [
        "name=smoke-warm", "tracking.experiment=smoke-warm", "tracking.registered_model=smoke-warm-student",
        "seeds=[0]", "train.epochs=1", "search.algorithm=motpe", "search.num_configurations=1",
        f"search.warm_start={tmp_path / 'smoke-motpe'}",
        "methods={kd: {init_from: pretrained, num_layers: {randint: [1, 3]}, learning_rate: {choice: [1.0e-7, 1.0e-3]}}}",
    ]), tmp_path)
    assert len(warm) == 1, warm[["trial_id", "status"]].to_string()  # the budget counts its own configurations only
    seeded = [t for t in load_study(tmp_path, "smoke-warm").trials if "warm_start" in t.user_attrs]
    assert [(t.state, t.params, t.values) for t in seeded] == [(TrialState.COMPLETE, complete.params, complete.values)]

