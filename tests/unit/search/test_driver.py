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


def test_a_trial_in_its_actor_fails_tune_while_retries_remain_then_ends_with_its_failed_outcome(tmp_path, monkeypatch):
    """As Train retries a worker: the exception goes to Tune (which retries the trial from its last
    checkpoint) while `search.max_failures` allows; the last attempt returns it, so the trial
    ends normally with the failed outcome the worker wrote, and `--resume` does not train it again."""
    from pipeline.search import driver
    from pipeline.search.outcome import read_outcome, write_outcome
    from pipeline.storage import WorkStore

    store = WorkStore.open(str(tmp_path))

    def fails(config):  # as the worker does: records the failure, then raises it
        write_outcome(store.path("trials/t"), {"status": "failed", "error": "RuntimeError: boom"})
        raise RuntimeError("boom")

    monkeypatch.setattr(driver, "train_here", fails)
    try:
        driver._train_in_actor({}, store, "trials/t", None, max_failures=1)
        raise AssertionError("the first attempt must fail the Tune trial")
    except RuntimeError:
        pass
    first = read_outcome(store.path("trials/t"))
    assert first == {"status": "failed", "error": "RuntimeError: boom", "attempt": 1}
    error = driver._train_in_actor({}, store, "trials/t", first, max_failures=1)  # Tune's retry: the last one
    assert isinstance(error, RuntimeError) and read_outcome(store.path("trials/t"))["status"] == "failed"
    # without retries, the first attempt is the last
    assert isinstance(driver._train_in_actor({}, store, "trials/u", None, max_failures=0), RuntimeError)
    monkeypatch.setattr(driver, "train_here", lambda config: None)
    assert driver._train_in_actor({}, store, "trials/v", None, max_failures=0) is None
