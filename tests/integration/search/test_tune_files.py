"""Tune's experiment folder under the sweep: its state, and no per-trial logger files.

The sweep's driver uploads Tune's experiment folder to the storage path, all of it, at every
experiment checkpoint; the JSON, CSV and TensorBoard loggers Tune adds by default wrote five files
a trial into it, so the upload grew with the trials done (`pipeline.search.tuner.without_tune_logger_files`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pipeline.search.tuner import without_tune_logger_files

pytestmark = pytest.mark.ray

LOGGER_FILES = {"result.json", "progress.csv", "params.json", "params.pkl"}


def _fit(storage: Path, name: str):
    from ray import tune

    def trainable(config):  # defined here, so Ray pickles it by value: its actors import nothing of drydock
        for step in range(3):
            tune.report({"score": config["x"] * (step + 1)})

    tuner = tune.Tuner(trainable, param_space={"x": tune.grid_search([1, 2])}, tune_config=tune.TuneConfig(reuse_actors=True),
                       run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=0))
    return tuner.fit()


def _logger_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and (p.name in LOGGER_FILES or p.name.startswith("events.out")))


def test_tune_writes_no_logger_files_a_trial_and_its_results_and_state_stay(ray_local, tmp_path, caplog):
    """Without the switch Tune writes its five files a trial (the test shows the cause, then the cure)."""
    with caplog.at_level(logging.WARNING), without_tune_logger_files():
        grid = _fit(tmp_path, "bare")
    assert _logger_files(tmp_path / "bare") == []
    assert sorted(r.metrics["score"] for r in grid) == [3, 6]  # the last reports, from Tune's state
    assert list((tmp_path / "bare").glob("experiment_state-*.json")) and (tmp_path / "bare" / "tuner.pkl").is_file()
    assert not [r for r in caplog.records if "Failed to fetch metrics" in r.getMessage()]
    _fit(tmp_path, "plain")  # Tune's defaults, the switch restored
    assert len(_logger_files(tmp_path / "plain")) == 2 * 5
