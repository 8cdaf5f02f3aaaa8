"""examples/quickstart.py runs as a notebook runs it: its cells in order, in one fresh process
whose logging nobody configured, on a small synthetic spec. It sweeps, reads the front, loads
the champion from the registry and labels text with it, through `drydock` alone (no CLI); so the
example cannot rot, and a notebook user sees the sweep's progress without configuring logging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "quickstart.py"
pytestmark = [pytest.mark.ray, pytest.mark.slow]

# Runs the example's cells one after another in one namespace, as a kernel does, then reports.
KERNEL = """
import json, logging, re, sys
import mlflow
levels = lambda: {n: logging.getLogger(n).level for n in ("", "mlflow", "drydock")}
before = levels()
cells = re.split(r"^# %%.*$", open(sys.argv[1]).read(), flags=re.M)[1:]
namespace = {"__name__": "__main__"}
for cell in cells:
    exec(compile(cell, sys.argv[1], "exec"), namespace)
result, predictions = namespace["result"], namespace["predictions"]
print("REPORT " + json.dumps({
    "cells": len(cells), "front": result.front["config"].tolist(), "trials": result.results["status"].tolist(),
    "champion": result.champion, "version": result.champion_version, "labels": predictions["label"].tolist(),
    "scores": predictions["score"].tolist(), "levels_changed": {n: [before[n], v] for n, v in levels().items() if v != before[n]}, "root_handlers": len(logging.getLogger().handlers),
    "tracking_uri": mlflow.get_tracking_uri(),
    "ray_running": "ray" in sys.modules and sys.modules["ray"].is_initialized(),
}))
"""


def small_spec(folder: Path) -> Path:
    spec = yaml.safe_load((ROOT / "sweeps" / "smoke.yaml").read_text())
    spec["methods"] = {"finetune": {}, "kd": {"alpha": 0.9, "temperature": 2.0}}  # two trials
    spec["search"] = {"scheduler": "fifo"}
    path = folder / "example.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.timeout(600)
def test_the_quickstart_example_runs_as_a_notebook_and_labels_text_with_the_champion(tmp_path):
    env = {**os.environ, "DRYDOCK_EXAMPLE_SPEC": str(small_spec(tmp_path)), "DRYDOCK_EXAMPLE_WORKDIR": str(tmp_path / "runs"),
           "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([sys.executable, "-c", KERNEL, str(EXAMPLE)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=570)
    out = proc.stdout
    (tmp_path / "notebook.out").write_text(out + proc.stderr)
    assert proc.returncode == 0, (out + proc.stderr)[-4000:]
    report = json.loads(next(line for line in out.splitlines() if line.startswith("REPORT "))[len("REPORT "):])
    assert report["cells"] >= 8 and report["trials"] == ["finished", "finished"]
    assert report["front"] and set(report["front"]) <= {"finetune", "kd alpha=0.9"}, report["front"]
    assert report["champion"] == "models:/smoke-student@champion" and report["version"] == "1"
    # the synthetic task's label names, one per text, each with its probability
    assert len(report["labels"]) == 2 and set(report["labels"]) <= {"class_0", "class_1"}, report["labels"]
    assert all(0.0 <= s <= 1.0 for s in report["scores"])
    # nothing configured logging, so the sweep's lines were shown; afterwards nothing is left set
    assert "prepare: 512 training examples" in out and "search: 2 trials" in out
    assert report["levels_changed"] == {} and report["root_handlers"] == 0
    assert str(tmp_path) not in report["tracking_uri"]  # MLflow's process-wide URI is not left pointing at the sweep's store
    assert (tmp_path / "runs" / "smoke" / "pareto.png").is_file()
    assert report["ray_running"] is False  # the Ray drydock.sweep started ended with the call
