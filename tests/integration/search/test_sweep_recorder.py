"""The recorder records trials off Tune's loop, and a resumed sweep records what a killed driver
never did (real MLflow on SQLite, real results table; Tune's results given as data). Its hooks
one by one: tests/unit/search/test_recorder.py."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
from mlflow.tracking import MlflowClient

from pipeline import results as results_table
from pipeline.config import spec_from_dict
from pipeline.search.outcome import write_outcome
from pipeline.search.recorder import SweepRecorder
from pipeline.search.space import expand_trials
from pipeline.search.state import SweepPaths
from pipeline.tracking import SweepTracker, tracking_uri


def _setup(tmp_path):
    spec = spec_from_dict({
        "name": "rec", "task": {"name": "synthetic", "source": "synthetic", "max_seq_length": 16},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
        "methods": {"finetune": {"learning_rate": {"grid": [1.0e-4, 2.0e-4]}}},
    })
    workdir = tmp_path / "w"
    tracker = SweepTracker(spec, workdir)
    tracker.start_parent(resume=False)
    paths = SweepPaths(workdir / "rec", "r1")
    paths.trials_dir.mkdir(parents=True)
    messages: list[str] = []
    callback = SweepRecorder(paths, tracker, "accuracy", 0.9, messages.append)
    return spec, workdir, tracker, paths, callback, messages


def test_reconcile_records_trials_a_killed_driver_left_unrecorded_once(tmp_path):
    spec, workdir, tracker, paths, callback, messages = _setup(tmp_path)
    done, stopped = expand_trials(spec)
    write_outcome(paths.trials_dir / done.key, {"status": "finished", "metric": 0.75, "metrics": {"accuracy": 0.75}, "steps": 40})
    # Tune's view after a restore: one trial finished (its outcome written), one stopped by ASHA
    grid = [
        SimpleNamespace(config={"trial": done}, metrics={"drydock_final": 1.0, "eval/accuracy": 0.75}, error=None),
        SimpleNamespace(config={"trial": stopped}, metrics={"eval/accuracy": 0.5, "step": 20, "epoch": 1}, error=None),
    ]
    callback.reconcile(grid)
    callback.reconcile(grid)  # nothing left to record: no duplicate rows or runs
    callback.close()

    frame = results_table.read_results(paths.results).set_index("trial_id")
    assert sorted(frame.index) == sorted([done.key, stopped.key])
    assert frame.loc[done.key, "status"] == "finished" and frame.loc[done.key, "metric"] == 0.75
    assert frame.loc[stopped.key, "status"] == "stopped" and frame.loc[stopped.key, "metric"] == 0.5
    assert frame.loc[done.key, "teacher_metric"] == 0.9

    client = MlflowClient(tracking_uri(spec, workdir))
    runs = client.search_runs([tracker.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_id}'")
    assert sorted(r.info.run_name for r in runs) == sorted([done.key, stopped.key])
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert sum(m.startswith(f"trial {done.key}: finished") for m in messages) == 1


def test_a_recording_error_is_reported_and_the_next_trial_still_recorded(tmp_path, monkeypatch):
    spec, workdir, tracker, paths, callback, messages = _setup(tmp_path)
    first, second = expand_trials(spec)
    write_outcome(paths.trials_dir / second.key, {"status": "finished", "metric": 0.6, "metrics": {"accuracy": 0.6}})
    real = tracker.trial_run

    def unreachable(trial_id, *args):
        if trial_id == first.key:
            raise RuntimeError("tracking server unreachable")
        return real(trial_id, *args)

    monkeypatch.setattr(tracker, "trial_run", unreachable)
    callback.on_trial_start(0, [], SimpleNamespace(config={"trial": first}, trial_id="a"))
    callback.reconcile([SimpleNamespace(config={"trial": second}, metrics={}, error=None)])
    callback.close()
    assert any(f"recording the start of trial {first.key}" in m and "tracking server unreachable" in m for m in messages)
    frame = results_table.read_results(paths.results)
    assert list(frame["trial_id"]) == [second.key] and list(frame["status"]) == ["finished"]


def test_a_trial_the_scheduler_stopped_is_stopped_whatever_its_dying_worker_wrote(tmp_path):
    # When ASHA stops a trial, Tune kills its actor; the Train worker may still write a "failed"
    # outcome (its controller died under it) before the driver records the trial. A trial that
    # reached its final report is judged by its outcome, as before.
    spec, workdir, tracker, paths, callback, messages = _setup(tmp_path)
    stopped, failed = expand_trials(spec)
    for t in (stopped, failed):
        write_outcome(paths.trials_dir / t.key, {"status": "failed", "error": "ActorDiedError: The actor is dead because its owner has died."})
    trial = lambda t: SimpleNamespace(config={"trial": t}, trial_id=t.key)
    callback.on_trial_result(0, [], trial(stopped), {"eval/accuracy": 0.55, "step": 8, "epoch": 1.0, "loss/total": 0.25,
                                                     "checkpoint_dir_name": "checkpoint_000000"})
    callback.on_trial_complete(0, [], trial(stopped))
    callback.on_trial_result(0, [], trial(failed), {"eval/accuracy": 0.6, "step": 8, "epoch": 1.0})
    callback.on_trial_result(0, [], trial(failed), {"drydock_final": 1.0, "eval/accuracy": float("nan")})
    callback.on_trial_complete(0, [], trial(failed))
    callback.close()

    frame = results_table.read_results(paths.results).set_index("trial_id")
    # what a trial reports reaches its MLflow run at its step: evaluations and the losses
    history = tracker.client.get_metric_history(frame.loc[stopped.key, "mlflow_run_id"], "loss/total")
    assert [(m.value, m.step) for m in history] == [(0.25, 8)]
    assert frame.loc[stopped.key, "status"] == "stopped" and frame.loc[stopped.key, "metric"] == 0.55
    assert frame.loc[stopped.key, "steps"] == 8 and pd.isna(frame.loc[stopped.key, "error"])
    assert frame.loc[failed.key, "status"] == "failed" and "ActorDiedError" in frame.loc[failed.key, "error"]
