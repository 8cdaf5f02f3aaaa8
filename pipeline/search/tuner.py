"""The sweep's one `Tuner`: its trainable, its scheduler and its time axis, new or restored.

One Tuner grids over the concrete trial list of `pipeline.search.space` (every method together,
and a restored sweep sees exactly the same trials), or, when the spec names a searching
algorithm, takes its trials from `pipeline.search.searcher` one at a time. Its trainable is the thin trial driver of
`pipeline.search.driver`, which reserves no CPU: the trial's Train workers hold the resources
(with `resources.trial_runner: tune-actor` the trial trains in the driver, which holds them).
Why the driver's reservation and the actor reuse are set as they are: `docs/search-on-ray.md`.
Beside the caller's callback (the recorder) it attaches `SweepProgress`, which shows the search
while it runs (`pipeline.search.trial_table`).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from pipeline.config import SweepSpec
from pipeline.search.driver import SearchContext, trial_driver
from pipeline.search.ray_instance import DRIVER_RESOURCES
from pipeline.search.recorder import stand_in_callback
from pipeline.search.searcher import ConfigurationSearcher
from pipeline.search.space import Trial, key_of
from pipeline.search.state import RunStorage, SweepRun
from pipeline.search.trial_table import SweepBoard
from pipeline.training.step_bar import display_mode
from pipeline.training.step_bar import logger as progress_log

# ASHA's time axis: what the training loop reports as `progress`, the fraction of its labeled
# training a trial has done (pipeline.training.loop). Every method's trials meet at the same
# rungs, however their phases are cut (MiniLM's unlabeled distillation, a max_steps cap).
TIME_ATTR = "progress"


# Tune's own switch (documented in Ray's environment-variable reference) for the JSON, CSV and
# TensorBoard logger callbacks it adds when none is given.
NO_TUNE_LOGGERS = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
_ANALYSIS_LOGGER = "ray.tune.analysis.experiment_analysis"


class _NoMissingMetricFiles(logging.Filter):
    """Drops Tune's end-of-fit warning that it found no result.json or progress.csv to read back
    (one line per trial): without its loggers there is none, by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to fetch metrics for")


_QUIET = _NoMissingMetricFiles()
_switch_lock = threading.Lock()
_inside = 0  # sweeps of this process inside without_tune_logger_files
_callers_value: str | None = None  # the variable as the first of them found it


@contextlib.contextmanager
def without_tune_logger_files() -> Iterator[None]:
    """Around `Tuner.fit()`: Tune writes no result.json, progress.csv, params or TensorBoard
    events per trial into its experiment folder.

    Why: the sweep's driver uploads that whole folder to the storage path at every experiment
    checkpoint (every 10 s at first), every file every time, so five files a trial made the
    upload grow with the trials done and a sweep's upload work with their square; on S3 it was
    the largest single part of the driver's search-stage samples in a profile
    (benchmarks/RESULTS.md, "The driver's S3 work"; docs/stack-facts.md, "Work locations").
    drydock reads none of them: a trial's figures are in the results table and MLflow, and a
    restored Tuner reads the experiment state, which stays. The caller's value of the variable,
    and Tune's warning about the missing files (filtered out meanwhile), come back after the last
    of the sweeps running in this process at once has left (a notebook may run two in threads)."""
    global _inside, _callers_value
    with _switch_lock:
        if _inside == 0:
            _callers_value = os.environ.get(NO_TUNE_LOGGERS)
            os.environ[NO_TUNE_LOGGERS] = "1"
            logging.getLogger(_ANALYSIS_LOGGER).addFilter(_QUIET)
        _inside += 1
    try:
        yield
    finally:
        with _switch_lock:
            _inside -= 1
            if _inside == 0:
                logging.getLogger(_ANALYSIS_LOGGER).removeFilter(_QUIET)
                if _callers_value is None:
                    os.environ.pop(NO_TUNE_LOGGERS, None)
                else:
                    os.environ[NO_TUNE_LOGGERS] = _callers_value


def scheduler(spec: SweepSpec, metric_key: str) -> TrialScheduler:
    """The spec's scheduler. ASHA's `search.asha.grace_period` is given in epochs of
    `train.epochs` and converted here, the one place that knows the time axis is a fraction."""
    if spec.search.scheduler != "asha":
        return FIFOScheduler()
    epochs = spec.train.epochs
    return ASHAScheduler(
        # Ray types max_t and grace_period as int; the time axis here is the fraction of training done
        time_attr=TIME_ATTR, metric=metric_key, mode="max", max_t=1.0,  # type: ignore[arg-type]
        grace_period=min(spec.search.asha.grace_period, epochs) / epochs,  # type: ignore[arg-type]
        reduction_factor=spec.search.asha.reduction_factor,
    )


def make_tuner(
    spec: SweepSpec,
    trials: Sequence[Trial],
    context: SearchContext,
    storage: RunStorage,
    *,
    concurrency: int,
    callback: tune.Callback,
    run: SweepRun,
    log: Callable[[str], None],
    searcher: ConfigurationSearcher | None = None,
) -> tune.Tuner:
    """A new Tuner, or, resuming, the interrupted one restored (its finished trials are kept).
    `trials`: the grid's fixed list; with a `searcher` (`search.algorithm` other than grid) it
    is empty and the searcher asks its study for the configurations as trials end."""
    trainable = tune.with_resources(tune.with_parameters(trial_driver, shared=context), trial_resources(spec))
    if searcher is None:
        # the trials themselves: Tune's variant generator copies and pickles them, never reads them
        param_space: dict[str, Any] = {"trial": tune.grid_search(list(trials))}
        total, samples = len(trials), 1
    else:  # the searcher hands Tune one trial at a time, each configuration once per seed
        param_space, samples = {}, (spec.search.num_configurations or 0) * len(spec.seeds)
        total = samples
    progress = SweepProgress(total, context.metric_key, searcher)
    if run.resuming and tune.Tuner.can_restore(storage.experiment_path):
        log(f"resume: continuing run {run.paths.run_id} (finished trials are kept)")
        tuner = tune.Tuner.restore(storage.experiment_path, trainable=trainable, resume_errored=True, param_space=param_space)
        assert tuner._local_tuner is not None  # a local Tuner, not a Ray Client one
        # callbacks are not restored: attach ours again
        tuner._local_tuner._run_config.callbacks = [callback, progress, CheckpointPruner(spec.train.keep_checkpoints)]
        if searcher is not None:  # tuner.pkl holds a stand-in (`ConfigurationSearcher.__reduce__`); Tune restores its records into this one
            tuner._local_tuner._tune_config.search_alg = searcher
        return tuner
    return tune.Tuner(
        trainable,
        param_space=param_space,
        # Tune reuses a finished trial's actor for the next trial, but not safely one a scheduler
        # stopped (docs/search-on-ray.md): only FIFO never stops a trial mid-run.
        tune_config=tune.TuneConfig(scheduler=scheduler(spec, context.metric_key), max_concurrent_trials=concurrency,
                                    reuse_actors=spec.search.scheduler == "fifo", search_alg=searcher, num_samples=samples),
        run_config=tune.RunConfig(
            name=storage.tune_name, storage_path=storage.root,
            callbacks=[callback, progress, CheckpointPruner(spec.train.keep_checkpoints)],
            # Train retries lost workers inside a trial; Tune retries a trial whose driver died
            # (its node was lost), and the new driver's Train run, same name and storage, resumes
            # from the trial's last checkpoint. A trial whose training raises is not a Tune
            # failure once its retries are spent: its driver records it and reports normally
            # (trained in its actor, the retries before are Tune's: `driver._train_in_actor`).
            failure_config=tune.FailureConfig(max_failures=spec.search.max_failures), verbose=0,
        ),
    )


class CheckpointPruner(tune.Callback):
    """Keeps `train.keep_checkpoints` of each trial's Tune checkpoints (a trial trained in its
    actor, `resources.trial_runner: tune-actor`, reports them to Tune; a Train job keeps its own,
    `pipeline.search.trainer.run_train`), deleting older ones as newer ones register.

    Not Tune's `CheckpointConfig(num_to_keep=...)`: with it set, Tune forces an experiment-state
    snapshot and a sync to storage every `num_to_keep` trial checkpoints (`sync_every_n_trial_checkpoints`,
    ray/tune/execution/tune_controller.py and experiment_state.py, Ray 2.60), so with 1 every
    evaluation of every trial rewrote and uploaded the whole sweep's state. A snapshot can then
    name a checkpoint deleted since; the worker resumes from the newest one left
    (`pipeline.search.worker.RayReporter`)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.kept: dict[str, list[Any]] = {}

    def __reduce__(self):
        return (CheckpointPruner, (self.keep,))  # what it has seen is not kept across a restore

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        kept = self.kept.setdefault(trial.trial_id, [])
        kept.append(checkpoint)
        while len(kept) > self.keep:
            old = kept.pop(0)
            with contextlib.suppress(OSError):  # gone already: nothing to keep from
                old.filesystem.delete_dir(old.path)


def trial_resources(spec: SweepSpec) -> dict[str, float]:
    """What Tune reserves for a trial's own actor: nothing but memory when its Train workers hold
    the CPUs and GPUs (`DRIVER_RESOURCES`), the one worker's CPUs and GPUs when the trial trains
    in it (`resources.trial_runner: tune-actor`)."""
    r = spec.resources
    if r.trial_runner != "tune-actor":
        return DRIVER_RESOURCES
    return {**DRIVER_RESOURCES, "cpu": r.cpus_per_worker, **({"gpu": r.gpus_per_worker} if r.use_gpu else {})}


def _key(trial: Any) -> str:
    return key_of(trial.config["trial"])


class SweepProgress(tune.Callback):
    """Shows the search from the sweep's process, where Tune hands over every trial's events and
    reports: a live table on a terminal; in a log, a line when a trial starts or ends (with the
    done/running/pending counts), one per evaluation, and a heartbeat per running trial silent
    for `HEARTBEAT_S`; nothing under `drydock -q` (`pipeline.training.step_bar.display_mode`)."""

    def __init__(self, total: int, metric_key: str, searcher: ConfigurationSearcher | None = None) -> None:
        self.board = SweepBoard(total, metric_key)
        self.searcher = searcher  # a searching algorithm's: its told configurations and front are shown too
        self.mode = display_mode()
        self.live: Any = None
        self.synced = False

    def __reduce__(self):
        # pickled into tuner.pkl with the recorder; holds a live display, attached again on restore
        return (stand_in_callback, ())

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None,
              **info: Any) -> None:  # Tune's Callback.setup signature; nothing of it is read
        if self.mode == "live" and self.live is None:
            from rich.live import Live

            # transient: the table goes when the search ends, the trials' own lines stay; stdout and
            # stderr go through rich meanwhile, so log lines print above the table, not through it
            self.live = Live(self.board, refresh_per_second=2, transient=True, redirect_stdout=True, redirect_stderr=True)
            self.live.start()
            atexit.register(self.close)  # a driver that dies mid-search must not leave the terminal redirected

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        if not self.synced:  # a resumed search: Tune sends no event for the trials it finished before
            self.synced = True
            self.board.already_done(_key(t) for t in trials if t.status in ("TERMINATED", "ERROR"))

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        if self.mode == "lines":
            for line in self.board.heartbeats():
                progress_log.info(line)

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        key = _key(trial)
        self.board.started(key)
        self._say(f"{self.board.counts().text()} (trial {key} started)")

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any) -> None:
        line = self.board.reported(_key(trial), result)
        if line is not None:
            self._say(line)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.board.ended(_key(trial))
        self._say(self.board.counts().text())
        if self.searcher is not None:
            self._say(self.searcher.progress_text())

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.on_trial_complete(iteration, trials, trial)

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.board.recovered(_key(trial))

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.close()

    def _say(self, line: str) -> None:
        if self.mode == "lines":  # on a terminal the table shows it
            progress_log.info(line)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
            atexit.unregister(self.close)


def close_progress(tuner: tune.Tuner) -> None:
    """Stop the live table of `make_tuner`'s `SweepProgress`. Tune calls `on_experiment_end` only
    when the search ends normally: a search that raised would leave the table redrawing under the
    error lines until the process exits."""
    local = tuner._local_tuner
    for callback in (local._run_config.callbacks or []) if local is not None else []:
        if isinstance(callback, SweepProgress):
            callback.close()
