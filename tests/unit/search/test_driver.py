"""The per-trial driver stays light: Tune starts one actor per trial that imports it, on the same
CPUs the trials train on, so it must not pull in the model stack (transformers, drydock's
methods) that only the Train worker needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_importing_the_trial_driver_leaves_the_model_stack_unloaded():
    code = (
        "import json, sys, pipeline.search.driver, pipeline.search.trainer; "  # trainer: the Train controller's too (ReportRelay)
        "print(json.dumps({m: m in sys.modules for m in ('transformers', 'methods', 'pipeline.search.worker', 'datasets', 'mlflow')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"transformers": False, "methods": False, "pipeline.search.worker": False, "datasets": False, "mlflow": False}


def test_outcome_files_are_written_whole_and_read_back(tmp_path):
    from pipeline.search.outcome import OUTCOME_FILE, read_outcome, write_outcome

    assert read_outcome(tmp_path / "t") is None
    write_outcome(tmp_path / "t", {"status": "failed", "error": "boom"})
    assert read_outcome(tmp_path / "t") == {"status": "failed", "error": "boom"}
    assert [p.name for p in (tmp_path / "t").iterdir()] == [OUTCOME_FILE]  # no temporary left behind
