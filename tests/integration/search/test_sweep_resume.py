"""--resume after the sweep's driver is SIGKILLed: every trial ends up in the table and in
MLflow exactly once, and finished trials are not trained again. Runs the real CLI in
subprocesses, each with its own local Ray (its temp folder is cleaned after the kill). The work
location is a `file://` URI and the resumed driver starts with an empty cache, as on another
machine: all it continues from is in the location."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.search.test_sweep import ROOT, SMOKE, child_runs

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _sweep_cmd(workdir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "sweep", str(SMOKE), "--workdir", workdir.as_uri(),
            "--set", "methods={kd: {alpha: {grid: [0.3, 0.9]}}}", "--set", "search.scheduler=fifo",
            "--set", "resources.workers_per_trial=2", "--set", "train.epochs=1", "--set", "teacher.finetune.epochs=1", *extra]


def _kill_session(temp_dir: Path) -> None:
    """Ray processes a SIGKILLed driver orphans (DashboardAgent, RuntimeEnvAgent, ...)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    for line in out.splitlines()[1:]:
        pid, _, args = line.strip().partition(" ")
        if str(temp_dir) in args and int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def kill_after_first_outcome(cmd: list[str], sweep_dir: Path, env: dict[str, str], temp_dir: Path,
                             after_s: float = 0.0) -> list[Path]:
    """Start `drydock sweep`, SIGKILL its process group `after_s` seconds after the first trial's
    outcome appears, and clean up the Ray processes it orphans; returns the outcomes seen."""
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    deadline = time.time() + 300
    try:
        while time.time() < deadline:
            outcomes = list(sweep_dir.glob("runs/*/trials/*/outcome.json"))
            if outcomes or driver.poll() is not None:
                break
            time.sleep(1)
        assert driver.poll() is None, driver.stdout.read()[-3000:]
        assert outcomes, "no trial finished in time"
        time.sleep(after_s)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        _kill_session(temp_dir)
    return outcomes


def test_resume_after_killing_the_driver_finishes_every_trial_once(tmp_path):
    """Two 2-worker DDP trials; the driver is killed after the first finishes, then resumed."""
    workdir = tmp_path / "w"
    temp_dir = Path("/tmp") / f"dd{os.getpid()}"
    env = {**os.environ, "DRYDOCK_RAY_TMPDIR": str(temp_dir), "DRYDOCK_CACHE_DIR": str(tmp_path / "first-cache")}
    outcomes = kill_after_first_outcome(_sweep_cmd(workdir), workdir / "smoke", env, temp_dir)
    first = {p.parent.name for p in outcomes}
    env["DRYDOCK_CACHE_DIR"] = str(tmp_path / "second-cache")  # another machine: nothing of the first run's mirror
    resumed = subprocess.run(_sweep_cmd(workdir, "--resume"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    _kill_session(temp_dir)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resume: continuing run" in resumed.stdout
    results = pd.read_parquet(workdir / "smoke" / "results.parquet")
    assert len(results) == 2 and results["trial_id"].is_unique
    assert set(results["status"]) == {"finished"}
    # a trial finished before the kill was not trained again
    for key in first:
        outcome = json.loads(next((workdir / "smoke").glob(f"runs/*/trials/{key}/outcome.json")).read_text())
        assert outcome["world_size"] == 2 and outcome["strategy"] == "ddp"
    parents, children = child_runs(workdir, "smoke")
    assert len(parents) == 1
    assert sorted(c.data.tags["drydock.trial_id"] for c in children) == sorted(results["trial_id"])
    assert all(c.info.status == "FINISHED" for c in children)
