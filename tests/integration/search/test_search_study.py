"""A sweep whose configurations an Optuna study suggests (`search.algorithm: motpe`), through a
real local Ray: every configuration runs with all its seeds, and what the study was told agrees
with the results table (seed means, the latency the search measured, pruned where ASHA stopped)."""

from __future__ import annotations

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from pipeline.config import load_spec
from tests.integration.search.test_sweep import SMOKE

pytestmark = pytest.mark.ray


def load_study(workdir, name: str) -> optuna.Study:
    journal = next((workdir / name).glob("runs/*/study.journal"))
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    return optuna.load_study(study_name=name, storage=storage)


def test_a_multi_objective_search_runs_each_configuration_on_every_seed_and_tells_the_study_what_the_table_says(
        ray_local, tmp_path):
    from pipeline.sweep import run_sweep

    spec = load_spec(SMOKE, [
        "name=smoke-motpe", "tracking.experiment=smoke-motpe", "tracking.registered_model=smoke-motpe-student",
        "seeds=[0, 1]", "train.epochs=2", "search.scheduler=asha", "search.max_concurrent_trials=2",
        "search.algorithm=motpe", "search.num_configurations=2",
        "methods={kd: {num_layers: {randint: [1, 3]}, learning_rate: {choice: [1.0e-7, 1.0e-3]}}}",
    ])
    frame = run_sweep(spec, tmp_path)
    seen = frame[["trial_id", "seed", "suggestion", "status", "metric", "params.num_layers", "params.learning_rate"]].to_string()
    assert len(frame) == 4 and frame["trial_id"].is_unique, seen
    frame["config_id"] = [key.split("-")[1] for key in frame["trial_id"]]
    by_config = frame.groupby("config_id")
    assert len(by_config) == 2, seen
    assert all(sorted(rows["seed"]) == [0, 1] for _, rows in by_config), seen  # paired: every seed of each
    assert sorted(by_config["suggestion"].first()) == [1, 2] and (by_config["suggestion"].nunique() == 1).all(), seen

    study = load_study(tmp_path, "smoke-motpe")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    told = {t.user_attrs["config_id"]: t for t in study.trials if "config_id" in t.user_attrs}
    assert set(told) == set(by_config.groups), seen
    for cid, rows in by_config:
        trial = told[cid]
        assert trial.params["kd.num_layers"] == rows["params.num_layers"].iloc[0]
        if (rows["status"] == "finished").all():
            assert trial.state == TrialState.COMPLETE, seen
            assert trial.values[0] == pytest.approx(rows["metric"].mean()), seen
            assert trial.values[1] > 0
        elif (rows["status"] == "failed").any():
            assert trial.state == TrialState.FAIL, seen
        else:  # ASHA stopped a seed: pruned, not a finished value
            assert trial.state == TrialState.PRUNED, seen
    # students of one depth share one search-time latency (timed once per architecture)
    complete = [(told[cid].params["kd.num_layers"], told[cid].values[1]) for cid in told if told[cid].state == TrialState.COMPLETE]
    for depth in {d for d, _ in complete}:
        assert len({lat for d, lat in complete if d == depth}) == 1
    assert pd.notna(frame["pareto"]).any()  # the select stage ran on the searched students
    report = (tmp_path / "smoke-motpe" / "report.md").read_text()
    assert "## Search" in report and "**motpe**, aiming at metric and latency: 2 of 2 configurations told" in report
    assert (tmp_path / "smoke-motpe" / "search.png").stat().st_size > 0  # published beside the report
