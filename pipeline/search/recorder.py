"""The recorder: every trial's results-table row and MLflow run, written by the sweep's driver.

Tune calls a callback's hooks on its event loop, which meanwhile starts no trial and handles no
report. Recording a finished trial (verifying its export in another process, copying the student
into the artifact store, a dozen tracking calls) takes seconds, more against a remote tracking
server, so nothing is written on Tune's loop: a table thread writes each trial's row (after
verifying its export), a tracking thread makes every MLflow call. A row never waits for, or
depends on, tracking: it is written first, without an `mlflow_run_id`, which the tracking thread
fills in once the trial's run is written. A run is tried a few times (RETRY_DELAYS_S); one the
tracking store still refuses is written later from its row, by `--resume` (`backfill`) or by the
next run of the sweep (`record_pending`, from `pipeline.search.state.start_run`). One thread each
keeps a trial's writes in order and SQLite single-writer; a lock keeps the table single-writer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, cast

import mlflow
import pandas as pd
from ray import tune

from pipeline import results as results_table
from pipeline.errors import first_line
from pipeline.search.outcome import OUTCOME_FILE, read_outcome
from pipeline.search.space import Trial, as_trial
from pipeline.search.state import SweepPaths
from pipeline.storage import WorkStore
from pipeline.tracking import SweepTracker, redacted
from pipeline.training.export import VERIFY_FILE, ExportMismatch, Verifier, load_reference, verify_export
from pipeline.workdir import METRICS_FILE, STUDENT_DIR, config_id_of

logger = logging.getLogger(__name__)

# A trial's statuses in the table once it is done with (anything else is still to be recorded).
DONE = ("finished", "failed", "stopped")
# What of a trial's reports reaches its MLflow run at each step.
REPORTED_NAMESPACES = ("eval", "schedule", "loss")
REPORTED_KEYS = ("epoch", "progress")
# What the outcome adds to the run's metrics besides `final/<metric>`.
FINAL_KEYS = ("num_params", "num_params_encoder", "train_seconds", "steps", "export_max_abs_diff")
# A trial's MLflow run is tried 1 + len(RETRY_DELAYS_S) times, these seconds apart (MLflow retries
# each HTTP call as well), once while the tracking store is failing; a run still not written is
# left to `backfill`/`record_pending`, its row without an `mlflow_run_id` until then.
RETRY_DELAYS_S = (2.0, 10.0)
# While the tracking store fails, a running trial's reports are sent at most this often: each call
# to a server that is down can take minutes of MLflow's own retries.
PAUSE_LIVE_S = 30.0


def stand_in_callback() -> tune.Callback:
    """What Tune's tuner.pkl holds in the recorder's place (see SweepRecorder.__reduce__)."""
    return tune.Callback()


def _trial(trial: Any) -> Trial:
    return as_trial(trial.config["trial"])


def _run_params(t: Trial) -> dict[str, Any]:
    return {"method": t.method, "seed": t.seed, "config_id": t.config_id, "params": t.params.model_dump(mode="json")}


def _present(value: Any) -> bool:
    return value is not None and not (pd.api.types.is_scalar(value) and pd.isna(value))


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _local(store: WorkStore | None, student: str | None) -> Path | None:
    """A student's folder on this node (an outcome or a row may give the store's address)."""
    if not student:
        return None
    return store.localize(student) if store is not None else Path(student)


def pending_rows(table: Path, run_exists: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
    """The rows of trials done with whose MLflow run was never written (no `mlflow_run_id`), and,
    with `run_exists`, those naming a run the tracking store does not have (`PushSchedule`)."""
    frame = results_table.read_results(table)
    if not len(frame):
        return []
    ids = frame["mlflow_run_id"].fillna("").astype(str)
    missing = ids == ""
    if run_exists is not None:
        missing |= ids.map(lambda run_id: run_id != "" and not run_exists(run_id))
    # pandas-stubs types records' keys as Hashable; the table's column names are strings
    return cast(list[dict[str, Any]], frame[frame["status"].isin(DONE) & missing].to_dict("records"))


def run_exists(tracker: SweepTracker, run_id: str) -> bool:
    try:
        tracker.client.get_run(run_id)
    except mlflow.exceptions.MlflowException:
        return False
    return True


def row_record(row: dict[str, Any]) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    """What a trial's MLflow run is written from, read back from its row: its key, run parameters,
    status and outcome (the reports a failing store missed while the trial ran are not in it)."""
    key, method = str(row["trial_id"]), str(row["method"])
    config_id = config_id_of(key, method)
    params = {k.removeprefix("params."): _plain(v) for k, v in row.items() if k.startswith("params.") and _present(v)}
    outcome: dict[str, Any] = {k: _plain(row[k]) for k in ("error", "student_path", "steps", "num_params", "num_params_encoder",
                                                           "train_seconds") if _present(row.get(k))}
    outcome["metrics"] = {k.removeprefix("metrics."): _plain(v) for k, v in row.items() if k.startswith("metrics.") and _present(v)}
    run_params = {"method": method, "seed": int(row["seed"]), "config_id": config_id, "params": params}
    return key, run_params, str(row["status"]), outcome


def write_trial_run(tracker: SweepTracker, key: str, run_params: dict[str, Any], status: str, outcome: dict[str, Any],
                    student: Path | None) -> str:
    """The trial's MLflow run (found by its key under the tracker's parent run, else created) with
    its final figures, status and student, closed; returns its id. Repeating it finishes the same run."""
    run_id = tracker.trial_run(key, run_params, {"drydock.method": run_params["method"]})
    final = {f"final/{k}": v for k, v in (outcome.get("metrics") or {}).items()}
    final.update({k: outcome[k] for k in FINAL_KEYS if outcome.get(k) is not None})
    tracker.log_metrics(run_id, final, int(outcome.get("steps") or 0))
    tags = {"drydock.status": status, "drydock.error": outcome.get("error"), "drydock.node_id": outcome.get("node_id")}
    tracker.set_tags(run_id, {k: v for k, v in tags.items() if v})
    if status == "finished" and student is not None and student.is_dir():
        tracker.log_artifacts(run_id, student, "student")
    tracker.finish(run_id, "FINISHED" if status in ("finished", "stopped") else "FAILED")
    return run_id


def set_run_id(table: Path, key: str, run_id: str) -> None:
    """The trial's row names its MLflow run, now written."""
    frame = results_table.read_results(table)
    frame.loc[frame["trial_id"] == key, "mlflow_run_id"] = run_id
    results_table.write(table, frame)


def record_pending(tracker: SweepTracker, table: Path, store: WorkStore | None = None) -> int:
    """Write the MLflow run of every row of `table` that has none, under `tracker`'s parent run
    (the next run of a sweep does this for the previous one); returns how many. The first failure
    is raised: the rows left keep waiting for the next time."""
    written = 0
    # the sweep's own SQLite store in a remote location reaches it on a schedule (`PushSchedule`):
    # after a killed driver, rows may name runs the fetched copy lacks
    scheduled = store is not None and store.is_remote and str(tracker.uri).startswith("sqlite:")
    for row in pending_rows(table, partial(run_exists, tracker) if scheduled else None):
        key, run_params, status, outcome = row_record(row)
        set_run_id(table, key, write_trial_run(tracker, key, run_params, status, outcome, _local(store, outcome.get("student_path"))))
        written += 1
    return written


# A file that grows with every trial (the results table, the sweep's own mlflow.db) pushed to a
# remote work location after each trial costs n²/2 trials' worth of bytes over a sweep of n.
PUSH_FRACTION = 0.2


class PushSchedule:
    """When such a file is pushed: once the trials recorded since its last push reach a fifth of
    those recorded before it (at least one), and whole at the end. Over n trials that is about six
    trials' worth of bytes per trial, whatever n (tests/unit/search/test_recorder.py); a driver
    killed in between leaves the store's copy at most a sixth behind, which `--resume` writes again
    (`reconcile`, `backfill`)."""

    def __init__(self) -> None:
        self.count = 0  # trials recorded
        self.pushed_at = 0  # ... when the file was last pushed

    def tick(self) -> bool:
        """One more trial recorded; whether to push now."""
        self.count += 1
        if self.count - self.pushed_at >= max(1, int(PUSH_FRACTION * self.pushed_at)):
            self.pushed_at = self.count
            return True
        return False

    def catch_up(self) -> bool:
        """Whether anything was recorded since the last push (which is then due, at the end)."""
        behind = self.count > self.pushed_at
        self.pushed_at = self.count
        return behind


class SweepRecorder(tune.Callback):
    """Owns every trial's MLflow run and row; runs in the sweep's driver process.

    A trial ends in one of three ways: `finished` (its driver's final report came, and its
    outcome says so and its export verifies), `failed` (its outcome or Tune says why), `stopped`
    (the scheduler ended it before its final report). `close()` drains the recorder's threads;
    `reconcile()` records, from Tune's own results, any trial whose recording a killed driver
    never got to; `backfill()` writes the runs an earlier driver's tracking store refused.
    """

    def __init__(self, paths: SweepPaths, tracker: SweepTracker, metric_name: str, teacher_metric: float | None,
                 log: Callable[[str], None] = print, store: WorkStore | None = None, tracking_file: str | None = None) -> None:
        self.paths, self.tracker, self.log = paths, tracker, log
        self.store = store  # where a trial's rank 0 pushed its folder (None: it wrote `paths` directly)
        self.tracking_file = tracking_file  # the sweep's own SQLite store, a key of `store`, pushed after each trial's run
        self.metric_name, self.teacher_metric = metric_name, teacher_metric
        self.last: dict[str, dict[str, Any]] = {}  # each trial's last evaluation report
        self.ended: set[str] = set()  # trials whose driver reported its final result
        self.verifier: Verifier | None = None
        self.queue: ThreadPoolExecutor | None = None  # the table thread
        self.tracking: ThreadPoolExecutor | None = None  # the tracking thread
        self.table_lock = threading.Lock()
        self.retry_delays: tuple[float, ...] = RETRY_DELAYS_S
        self.failing_since: float | None = None  # when a tracking call last failed, while none has succeeded since
        self.draining = False
        self.submitted: set[str] = set()  # trials whose run this recorder set out to write
        self.untracked: set[str] = set()  # ... and whose run is not written (yet)
        self.table_pushes, self.tracking_pushes = PushSchedule(), PushSchedule()  # to a remote work location
        self.started: dict[str, Trial] = {}  # trials Tune started in this driver, by key

    def __reduce__(self):
        # Tune pickles its callbacks into tuner.pkl; this one holds live clients and processes
        # and is attached again on restore, so only a stand-in is stored.
        return (stand_in_callback, ())

    # ------------------------------------------------------------------------------------------
    # Tune's hooks: read what Tune passes now, write later on the table and tracking threads
    # ------------------------------------------------------------------------------------------

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None,
              **info: Any) -> None:  # Tune's Callback.setup signature; nothing of it is read
        # Started with the search, not at the first finished trial: its start-up (seconds) then
        # overlaps the first trials' start-up instead of holding Tune's loop.
        if self.verifier is None:
            self.verifier = Verifier()
        self.backfill()  # a resumed run's rows whose runs its killed driver's tracking store refused

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        t = _trial(trial)
        self.started[t.key] = t
        self._track(f"the start of trial {t.key}", self.tracker.trial_run, t.key, _run_params(t),
                    {"drydock.method": t.method, "ray_trial_id": trial.trial_id})

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any) -> None:
        t = _trial(trial)
        if result.get("drydock_final"):
            self.ended.add(t.key)
            if result.get("driver_node_id"):
                tags = {"drydock.driver_node_id": str(result["driver_node_id"])}
                self._track(f"the driver of trial {t.key}", lambda: self.tracker.set_tags(self.tracker.trial_run(t.key), tags))
            return
        self.last[t.key] = result
        metrics = {k: v for k, v in result.items()
                   if k.split("/")[0] in REPORTED_NAMESPACES or k.startswith("eval_") or k in REPORTED_KEYS}
        step = int(result.get("step", 0))  # read now: Tune owns `result`
        self._track(f"metrics of trial {t.key}", lambda: self.tracker.log_metrics(self.tracker.trial_run(t.key), metrics, step))

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        t = _trial(trial)
        stopped = t.key not in self.ended  # complete without its final report: the scheduler stopped it
        self._record(f"trial {t.key}", self._finish, t, None, dict(self.last.get(t.key, {})), stopped)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        t = _trial(trial)
        error = str(getattr(trial, "error_message", None) or "trial errored")
        self._record(f"trial {t.key}", self._finish, t, error, dict(self.last.get(t.key, {})))

    # ------------------------------------------------------------------------------------------
    # the driver's calls
    # ------------------------------------------------------------------------------------------

    def drain(self) -> None:
        """Wait for every queued row (the results table is complete afterwards), then for every
        queued tracking call; while the tracking store fails, a trial's run still queued is not
        tried again here (each try against a server that is down can take minutes): its row
        waits for `backfill`."""
        self.draining = True
        try:
            if self.queue is not None:
                self.queue.shutdown(wait=True)
                self.queue = None
            if self.tracking is not None:
                self.tracking.shutdown(wait=True)
                self.tracking = None
        finally:
            self.draining = False

    def close(self) -> None:
        self.drain()
        try:  # what the schedule held back, now that nothing writes either file
            if self.table_pushes.catch_up() | self.tracking_pushes.catch_up():
                self._publish()
                self._publish_tracking()
        except Exception as e:  # the sweep pushes its files again as it ends (sweep.py, push_run_files)
            logger.exception("pushing the results table and the tracking store failed")
            self.log(f"warning: pushing the results table or the tracking store to the work location failed: {type(e).__name__}: {first_line(e, 300)}")
        if self.untracked:
            shown = ", ".join(sorted(self.untracked)[:5]) + (" …" if len(self.untracked) > 5 else "")
            self.log(f"warning: {len(self.untracked)} trial(s) have no MLflow run, the tracking store {redacted(self.tracker.uri)} failed "
                     f"({shown}); their rows are in {self.paths.results} without an mlflow_run_id, and `drydock sweep --resume`, "
                     "or the next run of this sweep, writes their runs")
            self.untracked.clear()  # said once
        if self.verifier is not None:
            self.verifier.close()
            self.verifier = None

    def interrupted(self) -> list[str]:
        """After a search stopped by a signal (`pipeline.search.interrupt`): the MLflow runs of
        the trials still running are closed as KILLED, and they get no row (Tune's state keeps
        them unfinished, and `--resume` runs them again; a `stopped` row would say the scheduler
        ended them). Returns their keys."""
        self.drain()
        open_trials = sorted(set(self.started) - self.submitted)
        for key in open_trials:
            t = self.started[key]
            self._track(f"the end of interrupted trial {key}",
                        lambda t=t: self.tracker.finish(self.tracker.trial_run(t.key, _run_params(t)), "KILLED"))
        self.drain()
        return open_trials

    def reconcile(self, result_grid: Any) -> None:
        """Record the trials Tune has done with but this driver never recorded.

        A driver killed between a trial's end and its recording leaves Tune's state saying
        "terminated" and no row: a resumed Tune does not run that trial again, so its row
        and MLflow run are written here from what Tune kept (outcome file, last report); then
        the runs of rows that have none (`backfill`).
        """
        self.drain()
        frame = results_table.read_results(self.paths.results)
        done = set(frame.loc[frame["status"].isin(DONE), "trial_id"]) if len(frame) else set()
        for result in result_grid:
            config = (result.config or {}).get("trial")
            if not config:
                continue
            t = as_trial(config)
            if t.key in done:  # drained above: every row this driver wrote is in the table
                continue
            error = str(result.error) if result.error is not None else None
            stopped = error is None and not (result.metrics or {}).get("drydock_final")
            last = {k: v for k, v in (result.metrics or {}).items() if not k.startswith("drydock_")}
            self._record(f"trial {t.key}", self._finish, t, error, last, stopped)
        self.drain()
        self.backfill()
        self.drain()

    def backfill(self) -> None:
        """Write the MLflow run of every row of the table that has none (the tracking store
        refused it to an earlier driver), unless this recorder set out to already."""
        # the sweep's own mlflow.db reaches the work location on a schedule (`PushSchedule`): a
        # resumed run's copy may lack runs its table names
        exists = partial(run_exists, self.tracker) if self.tracking_file else None
        try:
            rows = pending_rows(self.paths.results, exists)
        except Exception as e:  # an unreadable table is for the stages that need it to say
            self.log(f"warning: cannot read {self.paths.results} for runs left to write: {type(e).__name__}: {first_line(e, 300)}")
            return
        for row in rows:
            key, run_params, status, outcome = row_record(row)
            if key not in self.submitted:
                self._track_end(key, run_params, status, outcome)

    # ------------------------------------------------------------------------------------------
    # on the table thread and the tracking thread
    # ------------------------------------------------------------------------------------------

    def _record(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """On the table thread."""
        if self.queue is None:
            self.queue = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drydock-recorder")

        def job() -> None:
            try:
                fn(*args)
            except Exception as e:  # must not end the sweep; say what was lost
                logger.exception("recording %s failed", what)
                self.log(f"warning: recording {what} failed: {type(e).__name__}: {e}")

        self.queue.submit(job)

    def _submit_tracking(self, job: Callable[[], None]) -> None:
        if self.tracking is None:
            self.tracking = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drydock-tracking")
        self.tracking.submit(job)

    def _track(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """A running trial's call to the tracking store, on the tracking thread; skipped while the
        store fails (tried again PAUSE_LIVE_S after the last failure)."""

        def job() -> None:
            if self.failing_since is not None and time.monotonic() - self.failing_since < PAUSE_LIVE_S:
                return
            try:
                fn(*args)
            except Exception as e:  # a tracking hiccup must not end the sweep; say what was lost
                self.failing_since = time.monotonic()
                logger.exception("recording %s failed", what)
                self.log(f"warning: recording {what} failed: {type(e).__name__}: {e}")
                return
            self.failing_since = None

        self._submit_tracking(job)

    def _track_end(self, key: str, run_params: dict[str, Any], status: str, outcome: dict[str, Any]) -> None:
        """The trial's MLflow run written and closed, on the tracking thread, tried a few times;
        then its row names it."""
        self.submitted.add(key)
        self.untracked.add(key)

        def job() -> None:
            if self.draining and self.failing_since is not None:
                return  # left to backfill: see drain()
            attempts = 1 if self.failing_since is not None else 1 + len(self.retry_delays)
            for attempt in range(1, attempts + 1):
                try:
                    run_id = write_trial_run(self.tracker, key, run_params, status, outcome, self._student(outcome))
                    break
                except Exception as e:
                    self.failing_since = time.monotonic()
                    logger.warning("writing the MLflow run of trial %s failed (attempt %d of %d): %s", key, attempt, attempts,
                                   first_line(e, 300), exc_info=attempt == attempts)
                    if attempt == attempts:
                        self.log(f"warning: the MLflow run of trial {key} was not written ({attempts} attempt{'s' if attempts > 1 else ''}, "
                                 f"the last: {type(e).__name__}: {first_line(e, 300)}); its row stays without an mlflow_run_id until "
                                 "`drydock sweep --resume`, or the next run of this sweep, writes it")
                        return
                    time.sleep(self.retry_delays[attempt - 1])
            self.failing_since = None
            try:
                with self.table_lock:
                    set_run_id(self.paths.results, key, run_id)
                    due = self.tracking_pushes.tick()
                    if due:  # the table with the runs it names
                        self._publish()
                if due:
                    self._publish_tracking()
            except Exception as e:
                logger.exception("naming the run of trial %s in the table failed", key)
                self.log(f"warning: the row of trial {key} does not name its MLflow run {run_id}: {type(e).__name__}: {first_line(e, 300)}")
                return
            self.untracked.discard(key)

        self._submit_tracking(job)

    def _finish(self, t: Trial, error: str | None, last: dict[str, Any], stopped: bool = False) -> None:
        """The trial's row, on the table thread, before and whatever happens to its MLflow run."""
        status, outcome = self._outcome(t, error, last, stopped)
        row = results_table.trial_row(t.key, t.method, t.seed, t.params.model_dump(mode="json"), status, outcome, error=outcome.get("error"),
                                      metric_name=self.metric_name, suggestion=t.order)
        with self.table_lock:
            results_table.upsert(self.paths.results, [row])
            if self.table_pushes.tick():
                self._publish()
        metric = outcome.get("metric")
        shown = f"{self.metric_name} {metric:.4f}" if isinstance(metric, (int, float)) else (outcome.get("error") or "")[:120]
        self.log(f"trial {t.key}: {status} {shown}")
        self._track_end(t.key, _run_params(t), status, outcome)

    def _outcome(self, t: Trial, error: str | None, last: dict[str, Any], stopped: bool) -> tuple[str, dict[str, Any]]:
        """How the trial ended: its worker's outcome file, else what Tune saw."""
        outcome = self._fetched_outcome(self.paths.trials_dir / t.key)
        if stopped and outcome is not None and outcome.get("status") != "finished":
            # Tune killed the trial's actor; its Train worker, cut off from the controller that
            # died with it, may have written "failed: ActorDiedError" first. Not the trial's doing.
            outcome = None
        if outcome is None:  # stopped by the scheduler before it finished, or lost
            outcome = {"status": "stopped" if error is None else "failed", "error": error,
                       "metric": last.get(f"eval/{self.metric_name}"),
                       "metrics": {k.split("/", 1)[1]: v for k, v in last.items() if k.startswith("eval/")},
                       "steps": last.get("step")}
        status = outcome.get("status", "failed")
        if status == "finished":
            status, outcome = self._verify(self.paths.trials_dir / t.key, outcome)
        if outcome.get("teacher_metric") is None:
            outcome["teacher_metric"] = self.teacher_metric
        return status, outcome

    def _publish(self) -> None:
        """The table into the work location (and the sweep's own tracking store,
        `_publish_tracking`, with it) on the `PushSchedule`: a reader, or a `--resume` on another
        machine after this one died, finds them there at most a sixth of the trials behind."""
        if self.store is None or not self.store.is_remote:
            return
        key = self.store.key_of(self.paths.results)
        assert key is not None  # the results table lies in the work location
        self.store.push(key)

    def _publish_tracking(self) -> None:
        """On the tracking thread, the one writer of the SQLite file: never pushed mid-write."""
        if self.store is not None and self.store.is_remote and self.tracking_file:
            self.store.push(self.tracking_file)

    def _fetched_outcome(self, trial_dir: Path) -> dict[str, Any] | None:
        """The trial's outcome, and for a finished one its student and verification reference,
        fetched into this node's mirror when the work location is a URI."""
        store = self.store if self.store is not None and self.store.is_remote else None
        key = store.key_of(trial_dir) if store is not None else None
        if store is not None and key is not None:
            store.fetch(f"{key}/{OUTCOME_FILE}", fresh=True)
        outcome = read_outcome(trial_dir)
        if store is not None and key is not None and outcome is not None and outcome.get("status") == "finished":
            # fresh: an attempt that failed on this node may have left an export a retry replaced
            for name in (STUDENT_DIR, VERIFY_FILE, METRICS_FILE):
                store.fetch(f"{key}/{name}", fresh=True)
        return outcome

    def _student(self, outcome: dict[str, Any]) -> Path | None:
        """The student's folder on this node (its outcome may give the store's address)."""
        return _local(self.store, outcome.get("student_path"))

    def _verify(self, trial_dir: Path, outcome: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The export counts only if a fresh process without drydock reproduces its logits."""
        reference = trial_dir / VERIFY_FILE
        if not reference.is_file():
            return "finished", outcome
        if self.verifier is None:
            self.verifier = Verifier()
        batch, expected = load_reference(reference)
        try:
            student = self._student(outcome)
            assert student is not None  # a finished trial's outcome names its exported student
            outcome["export_max_abs_diff"] = verify_export(student, expected, batch, self.verifier)
        except ExportMismatch as e:
            return "failed", {**outcome, "error": str(e)}
        return "finished", outcome
