"""The recorder: every trial's MLflow run and results-table row, written by the sweep's driver.

Tune calls a callback's hooks on its event loop, which meanwhile starts no trial and handles no
report. Recording a finished trial (verifying its export in another process, copying the student
into the artifact store, a dozen tracking calls) takes seconds, more against a remote tracking
server, so every tracking and table write goes to one recorder thread: one thread keeps each
trial's writes in order and the results table single-writer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ray import tune

from pipeline import results as results_table
from pipeline.search.outcome import read_outcome
from pipeline.search.space import TrialSpec
from pipeline.search.state import SweepPaths
from pipeline.tracking import SweepTracker
from pipeline.training.export import VERIFY_FILE, ExportMismatch, Verifier, load_reference, verify_export

logger = logging.getLogger(__name__)

# A trial's statuses in the table once it is done with (anything else is still to be recorded).
DONE = ("finished", "failed", "stopped")
# What of a trial's reports reaches its MLflow run at each step.
REPORTED_NAMESPACES = ("eval", "schedule", "loss")
REPORTED_KEYS = ("epoch", "progress")
# What the outcome adds to the run's metrics besides `final/<metric>`.
FINAL_KEYS = ("num_params", "num_params_encoder", "train_seconds", "steps", "export_max_abs_diff")


def stand_in_callback() -> tune.Callback:
    """What Tune's tuner.pkl holds in the recorder's place (see SweepRecorder.__reduce__)."""
    return tune.Callback()


def _trial(trial: Any) -> TrialSpec:
    return TrialSpec.from_dict(trial.config["trial"])


def _run_params(t: TrialSpec) -> dict[str, Any]:
    return {"method": t.method, "seed": t.seed, "config_id": t.config_id, "params": t.params}


class SweepRecorder(tune.Callback):
    """Owns every trial's MLflow run and row; runs in the sweep's driver process.

    A trial ends in one of three ways: `finished` (its driver's final report came, and its
    outcome says so and its export verifies), `failed` (its outcome or Tune says why), `stopped`
    (the scheduler ended it before its final report). `close()` drains the recorder thread;
    `reconcile()` records, from Tune's own results, any trial whose recording a killed driver
    never got to.
    """

    def __init__(self, paths: SweepPaths, tracker: SweepTracker, metric_name: str, teacher_metric: float | None,
                 log: Callable[[str], None] = print) -> None:
        self.paths, self.tracker, self.log = paths, tracker, log
        self.metric_name, self.teacher_metric = metric_name, teacher_metric
        self.last: dict[str, dict[str, Any]] = {}  # each trial's last evaluation report
        self.ended: set[str] = set()  # trials whose driver reported its final result
        self.verifier: Verifier | None = None
        self.queue: ThreadPoolExecutor | None = None

    def __reduce__(self):
        # Tune pickles its callbacks into tuner.pkl; this one holds live clients and processes
        # and is attached again on restore, so only a stand-in is stored.
        return (stand_in_callback, ())

    # ------------------------------------------------------------------------------------------
    # Tune's hooks: read what Tune passes now, write later on the recorder thread
    # ------------------------------------------------------------------------------------------

    def setup(self, **info: Any) -> None:
        # Started with the search, not at the first finished trial: its start-up (seconds) then
        # overlaps the first trials' start-up instead of holding Tune's loop.
        if self.verifier is None:
            self.verifier = Verifier()

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        t = _trial(trial)
        self._record(f"the start of trial {t.key}", self.tracker.trial_run, t.key, _run_params(t),
                     {"drydock.method": t.method, "ray_trial_id": trial.trial_id})

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any) -> None:
        t = _trial(trial)
        if result.get("drydock_final"):
            self.ended.add(t.key)
            return
        self.last[t.key] = result
        metrics = {k: v for k, v in result.items()
                   if k.split("/")[0] in REPORTED_NAMESPACES or k.startswith("eval_") or k in REPORTED_KEYS}
        step = int(result.get("step", 0))  # read now: Tune owns `result`
        self._record(f"metrics of trial {t.key}", lambda: self.tracker.log_metrics(self.tracker.trial_run(t.key), metrics, step))

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
        """Wait for every queued recording (the results table is complete afterwards)."""
        if self.queue is not None:
            self.queue.shutdown(wait=True)
            self.queue = None

    def close(self) -> None:
        self.drain()
        if self.verifier is not None:
            self.verifier.close()
            self.verifier = None

    def reconcile(self, result_grid: Any) -> None:
        """Record the trials Tune has done with but this driver never recorded.

        A driver killed between a trial's end and its recording leaves Tune's state saying
        "terminated" and no row: a resumed Tune does not run that trial again, so its row
        and MLflow run are written here from what Tune kept (outcome file, last report).
        """
        self.drain()
        frame = results_table.read_results(self.paths.results)
        done = set(frame.loc[frame["status"].isin(DONE), "trial_id"]) if len(frame) else set()
        for result in result_grid:
            config = (result.config or {}).get("trial")
            if not config:
                continue
            t = TrialSpec.from_dict(config)
            if t.key in done:  # drained above: every row this driver wrote is in the table
                continue
            error = str(result.error) if result.error is not None else None
            stopped = error is None and not (result.metrics or {}).get("drydock_final")
            last = {k: v for k, v in (result.metrics or {}).items() if not k.startswith("drydock_")}
            self._record(f"trial {t.key}", self._finish, t, error, last, stopped)
        self.drain()

    # ------------------------------------------------------------------------------------------
    # on the recorder thread
    # ------------------------------------------------------------------------------------------

    def _record(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        if self.queue is None:
            self.queue = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drydock-recorder")

        def job() -> None:
            try:
                fn(*args)
            except Exception as e:  # a tracking hiccup must not end the sweep; say what was lost
                logger.exception("recording %s failed", what)
                self.log(f"warning: recording {what} failed: {type(e).__name__}: {e}")

        self.queue.submit(job)

    def _finish(self, t: TrialSpec, error: str | None, last: dict[str, Any], stopped: bool = False) -> None:
        run_id = self.tracker.trial_run(t.key, _run_params(t), {"drydock.method": t.method})
        status, outcome = self._outcome(t, error, last, stopped)
        row = results_table.trial_row(t.key, t.method, t.seed, t.params, status, outcome, error=outcome.get("error"),
                                      mlflow_run_id=run_id, metric_name=self.metric_name)
        results_table.upsert(self.paths.results, [row])
        self._close_run(run_id, status, outcome)
        metric = outcome.get("metric")
        shown = f"{self.metric_name} {metric:.4f}" if isinstance(metric, (int, float)) else (outcome.get("error") or "")[:120]
        self.log(f"trial {t.key}: {status} {shown}")

    def _outcome(self, t: TrialSpec, error: str | None, last: dict[str, Any], stopped: bool) -> tuple[str, dict[str, Any]]:
        """How the trial ended: its worker's outcome file, else what Tune saw."""
        outcome = read_outcome(self.paths.trials_dir / t.key)
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

    def _verify(self, trial_dir: Path, outcome: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The export counts only if a fresh process without drydock reproduces its logits."""
        reference = trial_dir / VERIFY_FILE
        if not reference.is_file():
            return "finished", outcome
        if self.verifier is None:
            self.verifier = Verifier()
        batch, expected = load_reference(reference)
        try:
            outcome["export_max_abs_diff"] = verify_export(Path(outcome["student_path"]), expected, batch, self.verifier)
        except ExportMismatch as e:
            return "failed", {**outcome, "error": str(e)}
        return "finished", outcome

    def _close_run(self, run_id: str, status: str, outcome: dict[str, Any]) -> None:
        final = {f"final/{k}": v for k, v in (outcome.get("metrics") or {}).items()}
        final.update({k: outcome[k] for k in FINAL_KEYS if outcome.get(k) is not None})
        self.tracker.log_metrics(run_id, final, int(outcome.get("steps") or 0))
        tags = {"drydock.status": status, "drydock.error": outcome.get("error"), "drydock.node_id": outcome.get("node_id")}
        self.tracker.set_tags(run_id, {k: v for k, v in tags.items() if v})
        student = outcome.get("student_path")
        if status == "finished" and student and Path(student).is_dir():
            self.tracker.log_artifacts(run_id, Path(student), "student")
        self.tracker.finish(run_id, "FINISHED" if status in ("finished", "stopped") else "FAILED")
