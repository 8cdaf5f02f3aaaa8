"""A sweep's runs on disk, and what `--resume` continues.

Folders, under `<workdir>/<sweep name>/`:
    state.json                 the current run id and its MLflow parent run (what --resume continues)
    results.parquet            one row per trial of the current run (the contract of pipeline/results.py)
    runs/<run id>/spec.json    the spec the run started with (a resumed run must keep it)
    runs/<run id>/tune/        Tune's experiment state (Tuner.restore reads it)
    runs/<run id>/train/       Ray Train checkpoints, one folder per trial (resume point for retries)
    runs/<run id>/trials/<key> each trial's student/, metrics.json and outcome.json
A new sweep run never deletes an earlier run's folders; results.parquet describes the newest.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import results as results_table
from pipeline.config import SweepSpec, spec_to_dict
from pipeline.errors import DrydockError
from pipeline.tracking import SweepTracker, flatten_params

STATE_FILE = "state.json"
SPEC_FILE = "spec.json"


@dataclass(frozen=True)
class SweepPaths:
    sweep_dir: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        return self.sweep_dir / "runs" / self.run_id

    @property
    def trials_dir(self) -> Path:
        return self.run_dir / "trials"

    @property
    def spec_file(self) -> Path:
        return self.run_dir / SPEC_FILE

    @property
    def results(self) -> Path:
        return self.sweep_dir / results_table.RESULTS_FILE


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: a new one, or the interrupted one `--resume` continues."""

    paths: SweepPaths
    resuming: bool
    state: dict[str, Any]  # state.json as this run found it

    @property
    def previous_run_id(self) -> str | None:
        return self.state.get("run_id")


@dataclass(frozen=True)
class RunStorage:
    """Checkpoints and Tune's state: the run's folder, or the spec's shared path or URI on a
    cluster (every node must reach it; a node-local path breaks retries on another node)."""

    root: str  # Tune's storage path
    tune_name: str  # Tune's experiment under it
    train: str  # the Train runs' storage path

    @property
    def experiment_path(self) -> str:
        return f"{self.root}/{self.tune_name}"


def read_state(sweep_dir: Path) -> dict[str, Any]:
    f = sweep_dir / STATE_FILE
    return json.loads(f.read_text()) if f.is_file() else {}


def save_state(sweep_dir: Path, state: dict[str, Any]) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    tmp = sweep_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, sweep_dir / STATE_FILE)


def open_run(spec: SweepSpec, sweep_dir: Path, resume: bool, log: Callable[[str], None]) -> SweepRun:
    """Which run this is; touches nothing on disk, so a check that fails later leaves it as it was."""
    state = read_state(sweep_dir)
    resuming = resume and bool(state.get("run_id"))
    if resume and not resuming:
        log(f"resume: no earlier run of {spec.name!r} in {sweep_dir}; starting a new one")
    run = SweepRun(SweepPaths(sweep_dir, state["run_id"] if resuming else time.strftime("%Y%m%d-%H%M%S")), resuming, state)
    if resuming:
        check_resumable(spec, run.paths.spec_file, run.paths.run_id)
    return run


def check_resumable(spec: SweepSpec, saved: Path, run_id: str) -> None:
    """A resumed run keeps its trials' configurations, and its unfinished trials would train with
    the spec given now: a run whose spec changed (other than `resources`, where it runs, and
    `train.keep_checkpoints`, how many checkpoints it keeps) would mix two studies in one table,
    so it is refused."""
    if not saved.is_file():  # killed before its spec was saved: nothing has trained yet
        return
    before = flatten_params(json.loads(saved.read_text()))
    now = flatten_params(spec_to_dict(spec))
    changed = sorted(k for k in before.keys() | now.keys()
                     if before.get(k) != now.get(k) and not k.startswith("resources.") and k != "train.keep_checkpoints")
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        raise DrydockError(f"--resume: the spec differs from the one run {run_id} started with ({shown}); "
                           "resume it with that spec, or run without --resume to start a new run")


def run_storage(spec: SweepSpec, paths: SweepPaths) -> RunStorage:
    if spec.resources.storage_path:
        root = spec.resources.storage_path.rstrip("/")
        return RunStorage(root, f"{spec.name}-{paths.run_id}-tune", f"{root}/{spec.name}-{paths.run_id}-train")
    return RunStorage(str(paths.run_dir), "tune", str(paths.run_dir / "train"))


def start_run(run: SweepRun, spec: SweepSpec, tracker: SweepTracker, params: dict[str, Any], teacher_metrics: dict[str, Any]) -> None:
    """Take the sweep's folder over, once every check has passed and the teacher is ready: the
    previous run's table moves into that run's folder, and the MLflow parent run starts (or the
    interrupted one continues)."""
    paths = run.paths
    paths.trials_dir.mkdir(parents=True, exist_ok=True)
    if not run.resuming and paths.results.exists() and run.previous_run_id:
        os.replace(paths.results, paths.sweep_dir / "runs" / run.previous_run_id / results_table.RESULTS_FILE)
    if run.resuming and run.state.get("parent_run_id"):
        tracker.parent_id = run.state["parent_run_id"]
        tracker.client.update_run(tracker.parent_id, status="RUNNING")
    else:
        tracker.start_parent(resume=False)
        paths.spec_file.write_text(json.dumps(spec_to_dict(spec), indent=2))
        tracker.log_parent_artifact(paths.spec_file)
        metrics = {f"teacher/{k.split('/', 1)[-1]}": v for k, v in teacher_metrics.items() if isinstance(v, (int, float))}
        tracker.log_parent(params=params, metrics=metrics)
    save_state(paths.sweep_dir, {"run_id": paths.run_id, "parent_run_id": tracker.parent_id, "status": "running"})


def end_run(run: SweepRun, tracker: SweepTracker, status: str) -> None:
    """Close the parent run ("FINISHED", else "KILLED") with the results table attached, and
    record how the run ended."""
    if run.paths.results.exists():
        tracker.log_parent_artifact(run.paths.results)
    tracker.end_parent(status if status == "FINISHED" else "KILLED")
    save_state(run.paths.sweep_dir, {"run_id": run.paths.run_id, "parent_run_id": tracker.parent_id, "status": status.lower()})
