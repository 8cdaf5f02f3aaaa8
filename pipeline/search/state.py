"""A sweep's runs on disk, and what `--resume` continues.

Folders, under `<workdir>/<sweep name>/`:
    state.json                 the current run id and its MLflow parent run (what --resume continues),
                               and its status: running, finished, failed, interrupted (SIGINT or
                               SIGTERM during the search), or killed (still "running" when the
                               next run started: its driver was killed)
    results.parquet            one row per trial of the current run (the contract of pipeline/results.py)
    runs/<run id>/spec.json    the spec the run started with (a resumed run must keep it)
    runs/<run id>/tune/        Tune's experiment state (Tuner.restore reads it)
    runs/<run id>/train/       Ray Train checkpoints, one folder per trial (resume point for retries)
    runs/<run id>/trials/<key> each trial's student/, metrics.json and outcome.json
A new sweep run never deletes an earlier run's folders; results.parquet describes the newest.
With a URI work location these live in this node's mirror and in the store (`pipeline.storage`):
the run's files are fetched when it opens and pushed when it starts and ends; Tune's and Train's
state go to the store directly (their storage path is its URI); trials push their own folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow

from pipeline import results as results_table
from pipeline.config import RAY_STORAGE_SCHEMES, SweepSpec, spec_as_written, spec_to_dict, written_values
from pipeline.errors import DrydockError
from pipeline.prepare.revisions import pin_revisions
from pipeline.storage import WorkStore
from pipeline.tracking import SweepTracker, flatten_params, redacted
from pipeline.workdir import (
    RUNS_DIR,
    SPEC_FILE,
    SPEC_VALUES_FILE,
    STATE_FILE,
    TRAIN_DIR,
    TRIALS_DIR,
    TUNE_DIR,
    atomic_write,
    resume_exempt,
    run_dir,
)
from pipeline.workdir import read_state as read_state

# What a resumed run may be given differently, as the spec's fields declare it (`Counts.resume`):
# where it runs (`resources`), how many checkpoints it keeps, and the hub commits (a branch may
# have moved since; the run keeps the commits it started with, `run_revisions`).
RESUME_MAY_DIFFER = frozenset(resume_exempt(SweepSpec))


@dataclass(frozen=True)
class SweepPaths:
    sweep_dir: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        return run_dir(self.sweep_dir, self.run_id)

    @property
    def trials_dir(self) -> Path:
        return self.run_dir / TRIALS_DIR

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
    store: WorkStore | None = None  # the work location; None: the sweep folder is the place of record
    opened_at: float = 0.0  # when this run opened: the sweep's files written since are the ones it pushes

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


def save_state(sweep_dir: Path, state: dict[str, Any]) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(sweep_dir / STATE_FILE, json.dumps(state, indent=2))


def open_run(spec: SweepSpec, sweep_dir: Path, resume: bool, log: Callable[[str], None], store: WorkStore | None = None) -> SweepRun:
    """Which run this is; touches nothing in the sweep's folder (a URI's files are only fetched
    into this node's mirror), so a check that fails later leaves it as it was."""
    remote = store is not None and store.is_remote
    if remote and store is not None:
        for name in (STATE_FILE, results_table.RESULTS_FILE):
            store.fetch(f"{spec.name}/{name}", fresh=True)
    state = read_state(sweep_dir)
    resuming = resume and bool(state.get("run_id"))
    if resume and not resuming:
        log(f"resume: no earlier run of {spec.name!r} in {store.uri(spec.name) if store else sweep_dir}; starting a new one")
    run = SweepRun(SweepPaths(sweep_dir, state["run_id"] if resuming else time.strftime("%Y%m%d-%H%M%S")), resuming, state, store,
                   opened_at=time.time())
    if resuming and remote and store is not None:
        for name in (SPEC_FILE, SPEC_VALUES_FILE):  # both: a fresh node's mirror has neither
            store.fetch(f"{spec.name}/{RUNS_DIR}/{run.paths.run_id}/{name}", fresh=True)
    if resuming:
        check_resumable(spec, run.paths.spec_file, run.paths.run_id)
    return run


def check_resumable(spec: SweepSpec, saved: Path, run_id: str) -> None:
    """A resumed run keeps its trials' configurations, and its unfinished trials would train with
    the spec given now: a run whose spec changed (other than in `RESUME_MAY_DIFFER`: where it
    runs, how many checkpoints it keeps) would mix two studies in one table, so it is refused."""
    if not saved.is_file():  # killed before its spec was saved: nothing has trained yet
        return
    before = _saved_params(saved)
    now = flatten_params(spec_as_written(spec))  # spec.json holds a `${VAR}` as written
    values = flatten_params(spec_to_dict(spec))  # a run saved before it did holds the value
    # label names the run read from its hub dataset's ClassLabel column (`pinned_task`) are in its
    # spec.json and not in a spec that leaves them to the dataset: not a change
    read_from_data = {k for k in before if k.startswith("task.label_names") and values.get(k) is None}
    # `auto` was decided when the run started, and its spec.json holds the decision, which it keeps
    if values.get("train.bf16") == "auto" and before.get("train.bf16") in ("on", "off"):
        read_from_data.add("train.bf16")
    changed = sorted(k for k in before.keys() | now.keys()
                     if before.get(k) not in (now.get(k), values.get(k)) and not _may_differ(k) and k not in read_from_data)
    changed += _variables_changed(spec, saved.with_name(SPEC_VALUES_FILE))
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        raise DrydockError(f"--resume: the spec differs from the one run {run_id} started with ({shown}); "
                           "resume it with that spec, or run without --resume to start a new run")


def _value_digest(salt: str, value: Any) -> str:
    """A slow salted hash (PBKDF2, 100,000 rounds: ~50 ms a field), so that the file is no quick
    oracle for guessing a value; a URI's credentials never reach it (`written_values`)."""
    text = json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.pbkdf2_hmac("sha256", text, bytes.fromhex(salt), 100_000).hex()


def write_spec_files(paths: SweepPaths, spec: SweepSpec) -> None:
    """spec.json as written (a `${VAR}` kept as `${VAR}`: a credential in tracking.uri is never
    written down) and, beside it, a salted digest of each such field's value (`written_values`):
    what lets a --resume tell that a variable now holds another value without recording it."""
    paths.spec_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(paths.spec_file, json.dumps(spec_as_written(spec), indent=2))
    salt = secrets.token_hex(16)
    digests = {path: _value_digest(salt, value) for path, value in written_values(spec).items()}
    atomic_write(paths.spec_file.with_name(SPEC_VALUES_FILE), json.dumps({"salt": salt, "values": digests}, indent=2))


def _variables_changed(spec: SweepSpec, saved: Path) -> list[str]:
    """The fields written as `${VAR}` then and now whose value differs (by the salted digests
    `write_spec_files` kept); none for a run started before they were kept."""
    if not saved.is_file():
        return []
    try:
        record = json.loads(saved.read_text())
        salt, digests = str(record["salt"]), dict(record["values"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return []  # unreadable: compared as written only, as for a run before the file existed
    return [f"{path}: the value of its variable" for path, value in sorted(written_values(spec).items())
            if path in digests and digests[path] != _value_digest(salt, value) and not _may_differ(path)]


def _may_differ(key: str) -> bool:
    """A `flatten_params` key that is, or lies under, a field a resumed run may be given differently."""
    return any(key == field or key.startswith(field + ".") for field in RESUME_MAY_DIFFER)


def _saved_params(saved: Path) -> dict[str, Any]:
    """A run's spec.json with the fields added since it was written at their defaults, so that a
    run started before a field existed (`selection.runtimes`, `selection.latency.shapes`, ...)
    still resumes; a file the model no longer reads is compared as written."""
    raw = json.loads(saved.read_text())
    try:
        return flatten_params(spec_to_dict(SweepSpec.model_validate(raw)))
    except ValueError:  # pydantic's ValidationError is one
        return flatten_params(raw)


def run_revisions(spec: SweepSpec, run: SweepRun) -> SweepSpec:
    """The spec with the hub commits this run trains on: those a resumed run started with (its
    spec.json), else the ones its revisions name now (`pin_revisions`); and the label names a
    resumed run read from its dataset, when the spec leaves them to it."""
    if not (run.resuming and run.paths.spec_file.is_file()):
        return pin_revisions(spec)
    saved = json.loads(run.paths.spec_file.read_text())
    revision, hub_revision = saved.get("teacher", {}).get("revision"), saved.get("task", {}).get("hub_revision")
    if any(isinstance(r, str) and "${" in r for r in (revision, hub_revision)):  # a commit given as ${VAR}: stored as written
        pinned = pin_revisions(spec)
        revision = pinned.teacher.revision if isinstance(revision, str) and "${" in revision else revision
        hub_revision = pinned.task.hub_revision if isinstance(hub_revision, str) and "${" in hub_revision else hub_revision
    teacher = spec.teacher.model_copy(update={"revision": revision})
    task_update = {"hub_revision": hub_revision}
    if spec.task.label_names is None and saved.get("task", {}).get("label_names") is not None:
        task_update["label_names"] = saved["task"]["label_names"]
    task = spec.task.model_copy(update=task_update)
    return spec.model_copy(update={"teacher": teacher, "task": task})


def saved_bf16(run: SweepRun) -> str | None:
    """The `train.bf16` a resumed run started with, decided then if the spec said `auto`
    (`ray_instance.resolve_bf16`): its remaining trials train as its first ones did."""
    if not (run.resuming and run.paths.spec_file.is_file()):
        return None
    return json.loads(run.paths.spec_file.read_text()).get("train", {}).get("bf16")


def run_storage(spec: SweepSpec, paths: SweepPaths, store: WorkStore | None = None) -> RunStorage:
    if spec.resources.storage_path:
        root = spec.resources.storage_path.rstrip("/")
        return RunStorage(root, f"{spec.name}-{paths.run_id}-tune", f"{root}/{spec.name}-{paths.run_id}-train")
    if store is not None and store.is_remote:  # Ray reads and writes the URI itself
        scheme = str(store.remote).partition("://")[0]
        if scheme not in RAY_STORAGE_SCHEMES:  # fsspec opens more than Ray's pyarrow-based storage does
            raise DrydockError(f"--workdir: Ray keeps its checkpoints and Tune state in the work location, and its storage "
                               f"opens {', '.join(s + '://' for s in sorted(RAY_STORAGE_SCHEMES))} only, not {scheme}://; "
                               "set resources.storage_path to a folder or a URI it opens")
        root = store.uri(f"{spec.name}/{RUNS_DIR}/{paths.run_id}")
        return RunStorage(root, TUNE_DIR, f"{root}/{TRAIN_DIR}")
    return RunStorage(str(paths.run_dir), TUNE_DIR, str(paths.run_dir / TRAIN_DIR))


def push_run_files(run: SweepRun) -> None:
    """The sweep's own files, from this node's mirror to the store: state, results, report,
    latency record, the run's spec (a trial's folder is pushed by its rank 0, Ray's state by Ray)."""
    store = run.store
    if store is None or not store.is_remote:
        return
    sweep_key = store.key_of(run.paths.sweep_dir)

    def written(p: Path) -> bool:  # by this run (a second of slack for the filesystem's clock)
        return not p.name.startswith(".") and p.stat().st_mtime >= run.opened_at - 1

    for child in sorted(run.paths.sweep_dir.iterdir()):
        if child.name != RUNS_DIR and written(child) and (child.is_file() or any(f.is_file() for f in child.rglob("*"))):
            store.push(f"{sweep_key}/{child.name}")
    for child in sorted(run.paths.run_dir.iterdir()) if run.paths.run_dir.is_dir() else []:
        if child.is_file() and written(child):
            store.push(f"{sweep_key}/{RUNS_DIR}/{run.paths.run_id}/{child.name}")


Backfill = Callable[[SweepTracker, Path, WorkStore | None], int]  # `pipeline.search.recorder.record_pending`


def close_previous(run: SweepRun, tracker: SweepTracker, log: Callable[[str], None] = print, backfill: Backfill | None = None) -> None:
    """What the previous run left open in MLflow, closed before a new run takes the folder over:
    the runs of its rows that its failing tracking store never got are written
    (`pipeline.search.recorder.record_pending`), and the runs a killed driver left RUNNING (the
    parent and its trials' runs) are set KILLED; state.json says "killed" for a run it said was
    still running. Best effort: a failure here is told, and does not stop the new run."""
    parent, previous = run.state.get("parent_run_id"), run.previous_run_id
    if not parent or not previous:
        return
    if backfill is not None and run.paths.results.exists():  # given by the caller: the recorder imports this module
        try:
            written = backfill(tracker.under(parent), run.paths.results, run.store)
            if written:
                log(f"run {previous}: wrote the MLflow runs of {written} trial(s) its tracking store had refused")
        except Exception as e:
            log(f"warning: run {previous}: the MLflow runs of its trials without one were not written: {type(e).__name__}: "
                f"{(str(e).strip().splitlines() or [''])[0][:200]}")
    try:
        parent_killed, killed = tracker.close_abandoned(parent)
    except Exception as e:
        log(f"warning: run {previous}: its MLflow runs left RUNNING in {redacted(tracker.uri)} were not closed: {type(e).__name__}: "
            f"{(str(e).strip().splitlines() or [''])[0][:200]}")
        return
    if parent_killed or killed:
        closed = " and ".join(([f"its parent run {parent}"] if parent_killed else []) + ([f"{killed} trial run(s)"] if killed else []))
        log(f"run {previous}: its driver stopped without closing its MLflow runs; {closed} left RUNNING now KILLED")
    if run.state.get("status") == "running":
        save_state(run.paths.sweep_dir, {**run.state, "status": "killed"})


def start_run(run: SweepRun, spec: SweepSpec, tracker: SweepTracker, params: dict[str, Any], teacher_metrics: dict[str, Any],
              log: Callable[[str], None] = print, backfill: Backfill | None = None) -> None:
    """Take the sweep's folder over, once every check has passed and the teacher is ready: what the
    previous run left open in MLflow is closed (`close_previous`), its table moves into that run's
    folder, and the MLflow parent run starts (or the interrupted one continues)."""
    paths = run.paths
    paths.trials_dir.mkdir(parents=True, exist_ok=True)
    if not run.resuming:
        close_previous(run, tracker, log, backfill)
    if not run.resuming and paths.results.exists() and run.previous_run_id:
        previous = run_dir(paths.sweep_dir, run.previous_run_id)
        previous.mkdir(parents=True, exist_ok=True)  # a URI's mirror on a fresh node has only the files it fetched
        os.replace(paths.results, previous / results_table.RESULTS_FILE)
        if run.store is not None and run.store.is_remote:  # the store's table moves too: a --resume reads it
            sweep_key = run.store.key_of(paths.sweep_dir)
            run.store.push(f"{sweep_key}/{RUNS_DIR}/{run.previous_run_id}/{results_table.RESULTS_FILE}")
            run.store.delete(f"{sweep_key}/{results_table.RESULTS_FILE}")
    if run.resuming and run.state.get("parent_run_id"):
        tracker.parent_id = run.state["parent_run_id"]
        try:
            tracker.client.update_run(tracker.parent_id, status="RUNNING")
        except mlflow.exceptions.MlflowException as e:
            raise DrydockError(f"--resume: run {paths.run_id}'s MLflow parent run {tracker.parent_id} is not in the tracking store "
                               f"{redacted(tracker.uri)} ({str(e).strip().splitlines()[0][:200]}); run without --resume to start a new run") from None
    else:
        tracker.start_parent(resume=False)
        write_spec_files(paths, spec)  # a --resume compares against both
        tracker.log_parent_artifact(paths.spec_file)
        metrics = {f"teacher/{k.split('/', 1)[-1]}": v for k, v in teacher_metrics.items() if isinstance(v, (int, float))}
        tracker.log_parent(params=params, metrics=metrics)
    save_state(paths.sweep_dir, {"run_id": paths.run_id, "parent_run_id": tracker.parent_id, "status": "running"})
    push_run_files(run)


def end_run(run: SweepRun, tracker: SweepTracker, status: str, log: Callable[[str], None] = print) -> None:
    """Close the parent run ("FINISHED", else "KILLED") with the results table attached, and
    record how the run ended. The record does not depend on the tracking store: a parent run it
    refuses to close stays RUNNING, and the next run closes it (`close_previous`)."""
    try:
        if run.paths.results.exists():
            tracker.log_parent_artifact(run.paths.results)
        tracker.end_parent(status if status == "FINISHED" else "KILLED")
    except Exception as e:  # the table and state.json are the record; say what MLflow lacks
        log(f"warning: the MLflow parent run {tracker.parent_id} was not closed ({type(e).__name__}: "
            f"{(str(e).strip().splitlines() or [''])[0][:200]}); the next run of this sweep closes it")
    save_state(run.paths.sweep_dir, {"run_id": run.paths.run_id, "parent_run_id": tracker.parent_id, "status": status.lower()})
    push_run_files(run)
