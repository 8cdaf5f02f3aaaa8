"""--resume of a searching sweep after its driver is SIGKILLed mid-run: the same study goes on,
exactly `search.num_configurations` configurations run, none twice. The real CLI in subprocesses,
as `test_sweep_resume.py` runs a grid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from pipeline.workdir import config_id_of
from tests.integration.search.test_sweep import ROOT, SMOKE
from tests.integration.search.test_sweep_resume import _kill_session, kill_after_first_outcome

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _cmd(workdir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "sweep", str(SMOKE), "--workdir", str(workdir),
            "--set", "methods={kd: {num_layers: {randint: [1, 3]}, alpha: {uniform: [0.1, 0.9]}}}",
            "--set", "search.scheduler=fifo", "--set", "search.algorithm=motpe", "--set", "search.num_configurations=3",
            "--set", "search.max_concurrent_trials=1", "--set", "train.epochs=1", "--set", "teacher.finetune.epochs=1", *extra]


def test_a_killed_search_resumes_its_study_and_runs_exactly_its_budget_with_no_configuration_twice(tmp_path):
    workdir = tmp_path / "w"
    temp_dir = Path("/tmp") / f"ds{os.getpid()}"
    env = {**os.environ, "DRYDOCK_RAY_TMPDIR": str(temp_dir)}
    outcomes = kill_after_first_outcome(_cmd(workdir), workdir / "smoke", env, temp_dir, after_s=3)  # into the second configuration
    first = {p.parent.name: p.stat().st_mtime_ns for p in outcomes}
    resumed = subprocess.run(_cmd(workdir, "--resume"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    _kill_session(temp_dir)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resume: continuing run" in resumed.stdout
    results = pd.read_parquet(workdir / "smoke" / "results.parquet")
    seen = results[["trial_id", "suggestion", "status"]].to_string()
    assert len(results) == 3 and results["trial_id"].is_unique and set(results["status"]) == {"finished"}, seen
    assert sorted(results["suggestion"]) == [1, 2, 3], seen
    for key, mtime in first.items():  # a configuration finished before the kill was not trained again
        assert next((workdir / "smoke").glob(f"runs/*/trials/{key}/outcome.json")).stat().st_mtime_ns == mtime
    journal = next((workdir / "smoke").glob("runs/*/study.journal"))
    study = optuna.load_study(study_name="smoke", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))))
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(t.user_attrs["config_id"] for t in complete) == sorted(config_id_of(k, "kd") for k in results["trial_id"]), seen
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
