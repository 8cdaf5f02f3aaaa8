"""Nothing lost (issue 21): a trial's row is written before, and whatever happens to, its MLflow
run; a run the tracking store failed to write is written later from its row (`--resume`, or the
next run of the sweep); the runs a killed driver left RUNNING are closed by the next run. Real
MLflow throughout: a SQLite store, and a client of a tracking server that is gone (a closed local
port, with MLflow's own HTTP retries off so that each call fails at once). No Ray cluster."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient

from pipeline import results as results_table
from pipeline.config import spec_from_dict
from pipeline.search.outcome import write_outcome
from pipeline.search.recorder import SweepRecorder, record_pending
from pipeline.search.space import expand_trials
from pipeline.search.state import SweepPaths, open_run, read_state, save_state, start_run
from pipeline.tracking import SweepTracker

SPEC = {
    "name": "rec", "task": {"name": "synthetic", "source": "synthetic", "max_seq_length": 16},
    "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
    "methods": {"finetune": {"learning_rate": {"grid": [1.0e-4, 2.0e-4, 3.0e-4]}}},
}


@pytest.fixture
def server_gone(monkeypatch):
    """A client of a tracking server that went away: every call is refused at once."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return MlflowClient(f"http://127.0.0.1:{port}")


def tune_trial(t, **extra):
    return SimpleNamespace(config={"trial": t}, trial_id=f"ray-{t.config_id}", **extra)


def test_every_row_is_written_while_the_tracker_fails_and_resume_writes_the_runs(tmp_path, server_gone):
    spec, workdir = spec_from_dict(SPEC), tmp_path / "w"
    tracker = SweepTracker(spec, workdir)
    tracker.start_parent(resume=False)
    paths = SweepPaths(workdir / "rec", "r1")
    paths.trials_dir.mkdir(parents=True)
    messages: list[str] = []
    recorder = SweepRecorder(paths, tracker, "accuracy", 0.8, messages.append)
    recorder.retry_delays = (0.0, 0.0)  # retried at once here
    done, failed, stopped = expand_trials(spec)
    recorder.on_trial_start(0, [], tune_trial(done))  # it starts, and reports, while the store answers
    recorder.on_trial_result(0, [], tune_trial(done), {"eval/accuracy": 0.5, "step": 4, "epoch": 1.0})
    recorder.drain()
    opened = tracker.trial_run(done.key)

    tracker.client = server_gone  # the tracking server goes away
    student = tmp_path / "student"
    student.mkdir()
    (student / "config.json").write_text("{}")
    write_outcome(paths.trials_dir / done.key, {"status": "finished", "metric": 0.72, "metrics": {"accuracy": 0.72},
                                                "steps": 16, "num_params": 1000, "num_params_encoder": 600,
                                                "train_seconds": 2.5, "student_path": str(student)})
    recorder.on_trial_result(0, [], tune_trial(done), {"drydock_final": 1.0, "eval/accuracy": 0.72})
    recorder.on_trial_complete(0, [], tune_trial(done))
    recorder.drain()  # its run tried three times
    for t in (failed, stopped):  # two more trials start and end while the store is gone
        recorder.on_trial_start(0, [], tune_trial(t))
        recorder.on_trial_result(0, [], tune_trial(t), {"eval/accuracy": 0.5, "step": 4, "epoch": 1.0})
    recorder.on_trial_error(0, [], tune_trial(failed, error_message="RuntimeError: the node died"))
    recorder.on_trial_complete(0, [], tune_trial(stopped))
    recorder.close()

    # every row, with its figures, and none claims a run
    frame = results_table.read_results(paths.results).set_index("trial_id")
    assert dict(frame["status"]) == {done.key: "finished", failed.key: "failed", stopped.key: "stopped"}
    assert frame.loc[done.key, "metric"] == 0.72 and frame.loc[done.key, "num_params_encoder"] == 600
    assert frame["mlflow_run_id"].isna().all()
    # the first trial's run was tried three times (the others, the store still failing, once at
    # most: not at all while the driver is closing the recorder)
    assert any(m.startswith(f"warning: the MLflow run of trial {done.key} was not written (3 attempts") for m in messages)
    assert any("3 trial(s) have no MLflow run" in m and "--resume" in m for m in messages)

    # --resume: the store answers again; the resumed driver's recorder writes the runs from the rows
    resumed = SweepTracker(spec, workdir)
    resumed.parent_id = tracker.parent_id
    again = SweepRecorder(paths, resumed, "accuracy", 0.8, messages.append)
    again.reconcile([])  # Tune has nothing left to run
    again.close()
    frame = results_table.read_results(paths.results).set_index("trial_id")
    assert frame.loc[done.key, "mlflow_run_id"] == opened  # the run opened when it started, now closed
    runs = {key: resumed.client.get_run(run_id) for key, run_id in frame["mlflow_run_id"].items()}
    assert {k: r.info.status for k, r in runs.items()} == {done.key: "FINISHED", failed.key: "FAILED", stopped.key: "FINISHED"}
    assert {k: r.data.tags["drydock.status"] for k, r in runs.items()} == dict(frame["status"])
    assert runs[done.key].data.metrics["final/accuracy"] == 0.72 and runs[done.key].data.metrics["num_params_encoder"] == 600
    assert runs[failed.key].data.tags["drydock.error"] == "RuntimeError: the node died"
    assert [a.path for a in resumed.client.list_artifacts(opened, "student")] == ["student/config.json"]
    again.reconcile([])  # once: nothing left to write
    assert len(resumed.client.search_runs([resumed.experiment_id], f"tags.`mlflow.parentRunId` = '{tracker.parent_id}'")) == 3


def test_the_next_run_closes_what_a_killed_driver_left_running(tmp_path, capsys):
    spec, workdir = spec_from_dict(SPEC), tmp_path / "w"
    sweep_dir = workdir / "rec"
    # a run killed mid-sweep: its parent and the runs of two trials still RUNNING (one of them ended
    # and has its row, whose run the failing tracker never closed), a third trial's run closed
    killed = SweepTracker(spec, workdir)
    parent = killed.start_parent(resume=False)
    running, ended, closed = expand_trials(spec)
    runs = {t.key: killed.trial_run(t.key, {"method": t.method}) for t in (running, ended, closed)}
    killed.finish(runs[closed.key], "FINISHED")
    results_table.upsert(sweep_dir / results_table.RESULTS_FILE, [results_table.trial_row(
        ended.key, ended.method, ended.seed, ended.params.model_dump(mode="json"), "finished",
        {"metric": 0.7, "metrics": {"accuracy": 0.7}, "steps": 8, "teacher_metric": 0.8}, metric_name="accuracy")])
    save_state(sweep_dir, {"run_id": "old", "parent_run_id": parent, "status": "running"})
    (sweep_dir / "runs" / "old" / "trials").mkdir(parents=True)

    run = open_run(spec, sweep_dir, resume=False, log=print)
    tracker = SweepTracker(spec, workdir)
    start_run(run, spec, tracker, params={"task": "synthetic"}, teacher_metrics={}, backfill=record_pending)  # as the sweep does

    client = tracker.client
    status = lambda run_id: client.get_run(run_id).info.status  # noqa: E731
    assert status(parent) == "KILLED" and status(runs[running.key]) == "KILLED"
    assert status(runs[ended.key]) == "FINISHED" and client.get_run(runs[ended.key]).data.metrics["final/accuracy"] == 0.7
    assert status(runs[closed.key]) == "FINISHED"
    moved = results_table.read_results(sweep_dir / "runs" / "old" / results_table.RESULTS_FILE)
    assert list(moved["mlflow_run_id"]) == [runs[ended.key]]  # the old table now names its run
    assert status(tracker.parent_id) == "RUNNING" and tracker.parent_id != parent
    assert read_state(sweep_dir) == {"run_id": run.paths.run_id, "parent_run_id": tracker.parent_id, "status": "running"}
    out = capsys.readouterr().out
    assert "run old" in out and "KILLED" in out
