"""Ctrl-C during the search stops the sweep as interrupted, not as a success (issue #37, item 2).

Ray Tune catches SIGINT, saves its state and returns from `fit()`: the sweep went on to select,
register, mark the run finished and exit 0, with the running trial's row `stopped`. The sweep
runs in its own process here, as `drydock sweep` does, so the signal reaches its main thread.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipeline.lock import spec_lock

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.mark.timeout(400)
def test_ctrl_c_during_the_search_stops_before_selection_marks_the_runs_killed_and_exits_130(tmp_path):
    command = [sys.executable, "-m", "pipeline.cli", "sweep", str(SMOKE), "--workdir", str(tmp_path),
               "--set", "methods={kd: {alpha: 0.5}}", "--set", "train.epochs=400", "--set", "search.scheduler=fifo"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # the trial is training and has reported: its MLflow run is open
        seen.append(line)
        if re.match(r"trial kd-\S+: \d+/\d+ steps", line):
            break
    else:
        pytest.fail("the sweep ended before its trial reported:\n" + "".join(seen[-30:]))
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=240)
    out = "".join(seen) + rest
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted by SIGINT: 1 running trial(s) stopped and marked KILLED in MLflow; no selection ran" in out, out[-3000:]

    sweep = tmp_path / "smoke"
    state = json.loads((sweep / "state.json").read_text())
    assert state["status"] == "interrupted"
    assert not (sweep / "report.md").exists() and not (sweep / "pareto.png").exists()
    # no row says the trial was stopped by the scheduler or finished: --resume runs it again
    assert not (sweep / "results.parquet").exists()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "smoke"]
    runs = client.search_runs([experiment.experiment_id])
    parent = client.get_run(state["parent_run_id"])
    assert parent.info.status == "KILLED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert [c.info.status for c in children] == ["KILLED"]
    assert client.search_model_versions("name='smoke-student'") == []
    with spec_lock(sweep, "test"):  # released
        pass
