"""`resources.trial_runner: tune-actor`: a one-worker trial trains in its Tune actor, without a Ray
Train job, and ends where the same trial run as a Train job ends."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from pipeline.config import load_spec

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
pytestmark = pytest.mark.ray


def sweep(workdir: Path, name: str, runner: str) -> pd.DataFrame:
    from pipeline.sweep import run_sweep

    spec = load_spec(SMOKE, [f"name={name}", f"tracking.experiment={name}", f"tracking.registered_model={name}",
                             "methods={finetune: {}, kd: {alpha: 0.5}}", "search.scheduler=fifo",
                             f"resources.trial_runner={runner}"])
    run_sweep(spec, workdir)
    return pd.read_parquet(workdir / name / "results.parquet").set_index("method")


@pytest.mark.slow  # two sweeps with their select stages: minutes
def test_a_trial_trained_in_its_tune_actor_ends_where_its_train_job_ends(ray_local, tmp_path):
    in_actor = sweep(tmp_path, "in-actor", "tune-actor")
    as_job = sweep(tmp_path, "as-job", "ray-train")
    assert list(in_actor["status"]) == ["finished", "finished"]
    for method in ("finetune", "kd"):  # the same seed, data order and steps: the same student
        assert in_actor.loc[method, "metric"] == as_job.loc[method, "metric"]
        assert in_actor.loc[method, "steps"] == as_job.loc[method, "steps"]
    # the Train jobs keep their checkpoints under train-<trial key>; the actor's trials started none
    jobs = {p.name.split("-")[1] for p in tmp_path.rglob("train-*") if p.is_dir()}
    assert jobs == {"finetune", "kd"} and not any("in-actor" in str(p) for p in tmp_path.rglob("train-*"))


def test_tune_actor_is_refused_for_more_than_one_worker_or_deepspeed():
    from pipeline.errors import SpecError

    for override, got in (("resources.workers_per_trial=2", "got 2 and ddp"), ("resources.strategy=deepspeed", "got 1 and deepspeed")):
        with pytest.raises(SpecError, match=f"resources.trial_runner: tune-actor runs a trial in one process.*{got}"):
            load_spec(SMOKE, ["resources.trial_runner=tune-actor", override])


def _actor_processes(session: Path) -> list[int]:
    """This Ray session's trial actors (a Tune function trainable runs in its trial's folder)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode()
            cwd = os.readlink(entry / "cwd")
        except (OSError, ValueError):
            continue
        if title.startswith("ray::ImplicitFunc") and cwd.startswith(str(session)):
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow  # a sweep whose one trial is long enough to be killed mid-run
def test_a_trial_whose_actor_dies_is_retried_by_tune_from_its_last_checkpoint(ray_local, tmp_path):
    import ray
    from mlflow import MlflowClient

    from pipeline.sweep import run_sweep

    session = Path(ray._private.worker._global_node.get_session_dir_path())
    spec = load_spec(SMOKE, ["name=retried", "tracking.experiment=retried", "tracking.registered_model=retried",
                             "methods={finetune: {}}", "search.scheduler=fifo", "resources.trial_runner=tune-actor",
                             "search.max_failures=1", "train.epochs=40"])  # 640 steps, an evaluation every 8
    killed: list[int] = []

    def kill_after_the_second_checkpoint() -> None:
        deadline = time.time() + 600
        while time.time() < deadline and not killed:
            if any(tmp_path.rglob("checkpoint_000001")):
                for pid in _actor_processes(session):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_after_the_second_checkpoint, daemon=True)
    killer.start()
    run_sweep(spec, tmp_path)
    killer.join(timeout=1)
    assert killed, "the trial ended before its second checkpoint"
    results = pd.read_parquet(tmp_path / "retried" / "results.parquet")
    assert list(results["status"]) == ["finished"] and list(results["steps"]) == [640]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = client.get_metric_history(results["mlflow_run_id"].iloc[0], "eval/accuracy")
    steps = [m.step for m in history]
    # resumed, not restarted: the evaluations up to the checkpoint it resumed from were not run again
    assert steps.count(8) == 1 and steps.count(16) == 1 and max(steps) == 640


@pytest.mark.slow
@pytest.mark.timeout(420)  # the failure this guards against is a hang
def test_a_trial_asha_stops_in_its_actor_is_recorded_stopped_and_the_next_one_runs(ray_local, tmp_path):
    """As `test_sweep.py::test_trials_asha_stops_mid_run_do_not_stall_the_trials_after_them`, the
    trials in their actors: ASHA stops the second (lr 1e-3 behind the first at its first rung)
    while it trains in its actor; Tune kills that actor (no reuse under ASHA), and the third runs."""
    from pipeline.sweep import run_sweep

    spec = load_spec(SMOKE, [
        "name=actor-asha", "tracking.experiment=actor-asha", "tracking.registered_model=actor-asha", "train.epochs=12",
        "search.scheduler=asha", "resources.trial_runner=tune-actor", "search.max_concurrent_trials=1",
        "methods={kd: {init_from: pretrained, learning_rate: {grid: [1.0e-7, 1.0e-3, 2.0e-7]}}}",
    ])
    frame = run_sweep(spec, tmp_path)
    seen = frame[["trial_id", "params.learning_rate", "status", "steps", "metric", "error"]].to_string()
    by_lr = frame.set_index("params.learning_rate")
    assert by_lr.loc[1.0e-3, "status"] == "stopped" and by_lr.loc[1.0e-3, "steps"] < 192, seen
    assert (by_lr.drop(index=1.0e-3)["status"] == "finished").all(), seen
