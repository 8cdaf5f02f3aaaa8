"""The recorder on its own: Tune's hooks called with small stand-ins for Tune's trials, a real
MLflow store on SQLite and a real results table. No Ray cluster is started."""

from __future__ import annotations

import math
import pickle
from types import SimpleNamespace

import pytest
from ray import tune

from pipeline import results as results_table
from pipeline.config import spec_from_dict
from pipeline.search.outcome import write_outcome
from pipeline.search.recorder import SweepRecorder
from pipeline.search.space import expand_trials
from pipeline.search.state import SweepPaths
from pipeline.tracking import SweepTracker

SPEC = {
    "name": "rec", "task": {"name": "synthetic", "source": "synthetic", "max_seq_length": 16},
    "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
    "methods": {"finetune": {"learning_rate": {"grid": [1.0e-4, 2.0e-4, 3.0e-4]}}},
}


@pytest.fixture
def sweep(tmp_path):
    spec = spec_from_dict(SPEC)
    tracker = SweepTracker(spec, tmp_path / "w")
    tracker.start_parent(resume=False)
    paths = SweepPaths(tmp_path / "w" / "rec", "r1")
    paths.trials_dir.mkdir(parents=True)
    messages: list[str] = []
    recorder = SweepRecorder(paths, tracker, "accuracy", 0.8, messages.append)
    return SimpleNamespace(trials=expand_trials(spec), tracker=tracker, paths=paths, recorder=recorder, messages=messages)


def tune_trial(t, **extra):
    """What the recorder reads of Tune's `Trial`: its config and its id (and an error message)."""
    return SimpleNamespace(config={"trial": t}, trial_id=f"ray-{t.config_id}", **extra)


def run_of(sweep, row):
    return sweep.tracker.client.get_run(str(row["mlflow_run_id"]))


def test_a_finished_a_failed_and_a_stopped_trial_each_get_their_row_and_run(sweep, tmp_path):
    done, failed, stopped = sweep.trials
    rec = sweep.recorder
    student = tmp_path / "student"
    student.mkdir()
    (student / "config.json").write_text("{}")
    for t in (done, failed, stopped):
        rec.on_trial_start(0, [], tune_trial(t))
        rec.on_trial_result(0, [], tune_trial(t), {"eval/accuracy": 0.5, "loss/total": 0.7, "schedule/rate": 0.1,
                                                   "progress": 0.5, "step": 8, "epoch": 1.0, "time_this_iter_s": 3.0})
    # finished: its worker wrote the outcome, its driver sent the final report
    write_outcome(sweep.paths.trials_dir / done.key, {
        "status": "finished", "metric": 0.72, "metrics": {"accuracy": 0.72}, "steps": 16, "num_params": 1000,
        "num_params_encoder": 600, "train_seconds": 2.5, "student_path": str(student)})
    rec.on_trial_result(0, [], tune_trial(done), {"drydock_final": 1.0, "eval/accuracy": 0.72})
    rec.on_trial_complete(0, [], tune_trial(done))
    # failed: Tune says the trial errored, and no outcome says more
    rec.on_trial_error(0, [], tune_trial(failed, error_message="RuntimeError: the node died"))
    # stopped: complete without the final report (the scheduler ended it)
    rec.on_trial_complete(0, [], tune_trial(stopped))
    rec.close()

    frame = results_table.read_results(sweep.paths.results).set_index("trial_id")
    assert sorted(frame.index) == sorted([done.key, failed.key, stopped.key])
    assert dict(frame["status"]) == {done.key: "finished", failed.key: "failed", stopped.key: "stopped"}
    row = frame.loc[done.key]
    assert (row["metric"], row["steps"], row["num_params_encoder"], row["train_seconds"]) == (0.72, 16, 600, 2.5)
    assert row["teacher_metric"] == 0.8 and row["retention"] == pytest.approx(0.72 / 0.8)
    assert row["metric_name"] == "accuracy" and row["params.learning_rate"] == 1.0e-4
    assert frame.loc[failed.key, "error"] == "RuntimeError: the node died" and frame.loc[failed.key, "metric"] == 0.5
    assert frame.loc[stopped.key, "metric"] == 0.5 and frame.loc[stopped.key, "steps"] == 8
    assert frame["error"].isna()[[done.key, stopped.key]].all()

    runs = {key: run_of(sweep, frame.loc[key]) for key in frame.index}
    assert {k: r.info.status for k, r in runs.items()} == {done.key: "FINISHED", failed.key: "FAILED", stopped.key: "FINISHED"}
    assert {k: r.data.tags["drydock.status"] for k, r in runs.items()} == dict(frame["status"])
    finished = runs[done.key].data
    assert finished.metrics["final/accuracy"] == 0.72 and finished.metrics["num_params_encoder"] == 600
    assert finished.params["method"] == "finetune" and finished.tags["ray_trial_id"] == f"ray-{done.config_id}"
    assert runs[failed.key].data.tags["drydock.error"] == "RuntimeError: the node died"
    # every report reaches the run at its step: evaluations, losses, schedules and the time axis;
    # Tune's own bookkeeping does not
    history = sweep.tracker.client.get_metric_history(frame.loc[stopped.key, "mlflow_run_id"], "loss/total")
    assert [(m.value, m.step) for m in history] == [(0.7, 8)]
    assert {"eval/accuracy", "schedule/rate", "progress", "epoch"} <= runs[stopped.key].data.metrics.keys()
    assert "time_this_iter_s" not in runs[stopped.key].data.metrics
    # the student is copied into the run's artifacts, and each trial is told once
    assert [a.path for a in sweep.tracker.client.list_artifacts(frame.loc[done.key, "mlflow_run_id"], "student")] == ["student/config.json"]
    assert sorted(m.split(":")[0] for m in sweep.messages) == sorted(f"trial {t.key}" for t in (done, failed, stopped))
    assert f"trial {done.key}: finished accuracy 0.7200" in sweep.messages


def test_a_trial_whose_worker_failed_is_failed_with_the_workers_reason(sweep):
    t = sweep.trials[0]
    write_outcome(sweep.paths.trials_dir / t.key, {"status": "failed", "error": "ValueError: 9 layers do not fit"})
    sweep.recorder.on_trial_result(0, [], tune_trial(t), {"drydock_final": 1.0, "eval/accuracy": math.nan})
    sweep.recorder.on_trial_complete(0, [], tune_trial(t))
    sweep.recorder.close()
    (row,) = results_table.read_results(sweep.paths.results).to_dict("records")
    assert (row["status"], row["error"]) == ("failed", "ValueError: 9 layers do not fit")
    assert run_of(sweep, row).info.status == "FAILED"


def test_a_recording_that_fails_is_reported_and_the_next_one_still_happens(sweep, monkeypatch):
    first, second = sweep.trials[:2]
    real = sweep.tracker.log_metrics

    def unreachable(run_id, metrics, step):
        if "eval/accuracy" in metrics:  # the first trial's evaluation
            raise ConnectionError("tracking server unreachable")
        real(run_id, metrics, step)

    monkeypatch.setattr(sweep.tracker, "log_metrics", unreachable)
    sweep.recorder.on_trial_result(0, [], tune_trial(first), {"eval/accuracy": 0.5, "step": 8})
    sweep.recorder.on_trial_complete(0, [], tune_trial(second))
    sweep.recorder.close()
    assert f"warning: recording metrics of trial {first.key} failed: ConnectionError: tracking server unreachable" in sweep.messages
    frame = results_table.read_results(sweep.paths.results)
    assert list(frame["trial_id"]) == [second.key] and list(frame["status"]) == ["stopped"]


def test_tune_stores_a_stand_in_not_the_recorder(sweep):
    # Tune pickles its callbacks with its state; the recorder holds a live MLflow client
    restored = pickle.loads(pickle.dumps(sweep.recorder))
    assert type(restored) is tune.Callback


def test_a_run_started_before_the_recorder_moved_still_unpickles():
    # what a run's tuner.pkl holds for the callback of a sweep started before the search stage
    # left pipeline/sweep.py: protocol-4 pickle of a call to pipeline.sweep._stand_in_callback()
    old = (b"\x80\x04\x95,\x00\x00\x00\x00\x00\x00\x00\x8c\x0epipeline.sweep\x94\x8c\x12_stand_in_callback"
           b"\x94\x93\x94)R\x94.")
    assert type(pickle.loads(old)) is tune.Callback


# --------------------------------------------------------------------------------------------
# files that grow with every trial reach a remote work location on a geometric schedule
# --------------------------------------------------------------------------------------------


def test_growing_files_are_pushed_geometrically_so_a_sweep_pushes_linear_bytes():
    """A file of n rows pushed after every trial costs n²/2 rows in all (1,000 trials: 500,000
    rows' worth of mlflow.db, issue #35 item 8); pushed when the trials since the last push reach
    a fifth of those before it, a few rows per trial whatever the sweep's size."""
    from pipeline.search.recorder import PushSchedule

    def per_trial(n: int) -> float:
        schedule, pushed = PushSchedule(), 0
        for count in range(1, n + 1):
            if schedule.tick():
                pushed += count  # the file holds `count` trials' rows when pushed
        return (pushed + n) / n  # and once more, whole, at the end

    schedule = PushSchedule()
    assert [c for c in range(1, 31) if schedule.tick()] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 19, 22, 26]
    assert per_trial(1000) < 7 and per_trial(50) < 7 and per_trial(1000) / per_trial(50) < 1.5
    assert per_trial(1000) * 1000 < 0.02 * (1000 * 1001 / 2)  # vs a push after every trial


def test_a_recorder_on_a_remote_location_pushes_on_the_schedule_and_everything_at_the_end(tmp_path, monkeypatch):
    from pipeline.search.recorder import PushSchedule
    from pipeline.storage import WorkStore
    from pipeline.tracking import TRACKING_DB

    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "cache"))
    remote = tmp_path / "bucket"
    remote.mkdir()
    pushed: list[str] = []

    class Counted(WorkStore):  # the real store, every push it makes noted
        def push(self, key: str) -> None:
            pushed.append(key)
            super().push(key)

    opened = WorkStore.open(remote.as_uri())
    store = Counted(opened.location, opened.local, opened.remote)
    spec = spec_from_dict(SPEC, [f"methods.finetune.learning_rate={{grid: {[round(1e-4 * (i + 1), 6) for i in range(24)]}}}"])
    tracker = SweepTracker(spec, store.local)
    tracker.start_parent(resume=False)
    paths = SweepPaths(store.local / "rec", "r1")
    paths.trials_dir.mkdir(parents=True)
    recorder = SweepRecorder(paths, tracker, "accuracy", 0.8, print, store=store, tracking_file=TRACKING_DB)
    trials = expand_trials(spec)
    for t in trials:
        recorder.on_trial_complete(0, [], tune_trial(t))
    recorder.close()

    schedule = PushSchedule()
    expected = sum(schedule.tick() for _ in trials) + 1  # and once at the end
    table = store.key_of(paths.results)
    assert pushed.count(TRACKING_DB) == expected and pushed.count(table) <= 2 * expected
    assert len(trials) == 24 and expected < 24 + 1  # every trial pushed both files, the table twice, before
    # what the store holds at the end is the whole record
    assert (remote / TRACKING_DB).read_bytes() == (store.local / TRACKING_DB).read_bytes()
    assert (remote / table).read_bytes() == paths.results.read_bytes()
    frame = results_table.read_results(remote / table)
    assert len(frame) == 24 and frame["mlflow_run_id"].notna().all()


def test_a_row_naming_a_run_the_tracking_store_lacks_gets_its_run_written_again(sweep):
    """The table and mlflow.db reach a remote location on a schedule, not together: a driver killed
    between them leaves rows naming runs the store's copy of mlflow.db never got. A resumed run
    writes those again (found by key under the parent, else created), as it does a row without one."""
    t = sweep.trials[0]
    sweep.recorder.on_trial_complete(0, [], tune_trial(t))
    sweep.recorder.close()
    frame = results_table.read_results(sweep.paths.results)
    frame["mlflow_run_id"] = "0123456789abcdef0123456789abcdef"  # no such run in this store
    results_table.write(sweep.paths.results, frame)
    again = SweepRecorder(sweep.paths, sweep.tracker, "accuracy", 0.8, sweep.messages.append, tracking_file="mlflow.db")
    again.backfill()
    again.close()
    (row,) = results_table.read_results(sweep.paths.results).to_dict("records")
    assert row["mlflow_run_id"] != "0123456789abcdef0123456789abcdef" and run_of(sweep, row).info.run_name == t.key
