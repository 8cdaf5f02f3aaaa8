"""How drydock runs one Ray Train job: the only place a `TorchTrainer` is built.

Two callers, one shape: a trial's driver (a Tune actor, `pipeline.search.driver`) and the teacher
stage on workers (`pipeline.search.teacher`). Both want the spec's workers, GPUs and CPUs per
worker, `train.keep_checkpoints` kept checkpoints (the latest is the resume point of a retry),
Train's retries, the patience to wait for workers while a cluster scales
(`resources.start_patience_s`), the reports relayed to the caller while `fit()` blocks, and none
of the actors drydock does not use.

Rank 0's reports reach the caller without an actor: a Ray Train run inside a Tune trial starts,
besides its workers, a controller, a placement-group cleaner and a synchronisation actor (all
needed). Ray's own way to hand the reports to Tune, `TuneReportCallback`, adds a `ray.util.queue`
actor: one more Python process per trial, started and importing on the CPUs the trials train on
(the processes of a trial start one after another, and Ray starts at most as many worker
processes at once as the node has CPUs). A file does the same here (`ReportRelay`);
`benchmarks/sweep_overhead.py` measures what this saves.

Imported by the trial driver and, when Ray unpickles `ReportRelay`, by the Train controller (which
unpickles the run's `TorchConfig` too, so it holds `ray.train.torch` already): it imports nothing
heavier than Ray Train (and the torch that `ray.train.torch` brings);
`tests/unit/search/test_driver.py` checks it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray.train
from ray.train.torch import TorchTrainer

if TYPE_CHECKING:
    from pipeline.config import SweepSpec

# How often Train's controller may be restarted within one run; a bound keeps a broken node from
# retrying forever (worker failures are `max_failures`, the spec's).
CONTROLLER_FAILURE_LIMIT = 3

# Ray Train's limit on one wait for a worker group's resources, read by the Train controller each
# time it starts the workers, from its own environment; `fit()` copies the variable from the
# calling process's environment into the controller's (docs/stack-facts.md, "worker-start-timeout").
START_TIMEOUT_VARIABLE = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
# One round of waiting is at most a minute (Ray's own default): a start that times out is a
# controller failure, and the retry asks again. The patience is made of as many rounds as it
# holds. Short rounds matter after a node is lost: a request Ray had placed on the dead node stays
# pending until its round ends, and the next round asks again on a live node (docs/stack-facts.md,
# "worker-start-timeout", with what was measured).
START_ROUND_S = 60


class WorkersDidNotStart(RuntimeError):
    """A Train run gave up waiting for its workers' resources: the cluster never had them free."""


@dataclass(frozen=True)
class TrainResources:
    """What one Train run of the sweep gets, read once from the validated spec."""

    num_workers: int
    use_gpu: bool
    cpus_per_worker: float
    gpus_per_worker: float
    max_failures: int
    keep_checkpoints: int = 1  # train.keep_checkpoints (the spec's default)
    start_patience_s: float | None = 1800.0  # resources.start_patience_s (the spec's default); None: no limit

    @classmethod
    def of(cls, spec: SweepSpec) -> TrainResources:
        r = spec.resources
        return cls(r.workers_per_trial, r.use_gpu, r.cpus_per_worker, r.gpus_per_worker, spec.search.max_failures,
                   spec.train.keep_checkpoints, r.start_patience_s)

    def per_worker(self) -> dict[str, float]:
        return {"CPU": self.cpus_per_worker, **({"GPU": self.gpus_per_worker} if self.use_gpu else {})}

    def start_timeout_s(self) -> int:
        """Ray's limit for one round of waiting for the workers: a minute, or the patience if shorter.

        Whole seconds, rounded up and at least 1: Ray truncates the limit to whole seconds, and a
        limit under one second becomes 0, a round that gives up at once (docs/stack-facts.md)."""
        if self.start_patience_s is None:
            return START_ROUND_S
        return max(1, min(START_ROUND_S, math.ceil(self.start_patience_s)))

    def start_rounds(self) -> int | None:
        """How many rounds make the patience (None: no limit)."""
        if self.start_patience_s is None:
            return None
        return max(1, math.ceil(self.start_patience_s / self.start_timeout_s()))

    def controller_failure_limit(self) -> int:
        """Train's limit on controller restarts: every round of the patience, and never fewer than
        CONTROLLER_FAILURE_LIMIT for other controller failures; -1 (no limit) without a patience."""
        rounds = self.start_rounds()
        return -1 if rounds is None else max(rounds - 1, CONTROLLER_FAILURE_LIMIT)

    def waited_too_long(self) -> WorkersDidNotStart:
        """The error a run that never got its workers ends with: the field, the wait, the resources."""
        waited = "without limit" if self.start_patience_s is None else f"within {self.start_patience_s:g} s"
        asked = self.controller_failure_limit() + 1
        rounds = f"Ray Train asked for them {asked} times, {self.start_timeout_s()} s each"
        return WorkersDidNotStart(
            f"resources.start_patience_s: the {self.num_workers} Train worker(s) of this run, {self.per_worker()} "
            f"each, did not start {waited} ({rounds}): the cluster never had those "
            "resources free. Give its autoscaler more time (raise resources.start_patience_s; null waits without "
            "limit), add nodes, or ask for less (resources.workers_per_trial, cpus_per_worker, gpus_per_worker)"
        )


def run_train(
    worker_fn: Callable[[dict[str, Any]], None],
    config: dict[str, Any],
    resources: TrainResources,
    *,
    name: str,
    storage_path: str,
    on_report: Callable[[dict[str, Any]], None],
) -> Exception | None:
    """Run `worker_fn(config)` on every worker and wait; returns what `fit()` raised, if anything.

    `name` must be unique and stable: a retried or restored run with the same name and storage
    resumes from its last checkpoint. Every report of rank 0 reaches `on_report` before this
    returns. The error is returned, not raised: a trial records it, the teacher stage explains it.
    While the cluster has no room for the workers, the run waits for it up to
    `resources.start_patience_s` (an autoscaler adding nodes); a run that waited in vain returns
    `WorkersDidNotStart`, one line that names the field and the resources it waited for.
    """
    with relayed_reports(on_report) as relay:
        trainer = lean_torch_trainer(
            worker_fn,
            train_loop_config=config,
            scaling_config=ray.train.ScalingConfig(
                num_workers=resources.num_workers, use_gpu=resources.use_gpu, resources_per_worker=resources.per_worker(),
            ),
            run_config=ray.train.RunConfig(
                # ray.train's names are Train v1's to a type checker (v2's are chosen at import time)
                name=name, storage_path=storage_path, callbacks=[relay],  # type: ignore[list-item]
                # No score attribute: Train keeps the `num_to_keep` latest in the order reported,
                # and never deletes the latest (the one `ray.train.get_checkpoint()` resumes from).
                checkpoint_config=ray.train.CheckpointConfig(num_to_keep=resources.keep_checkpoints),
                failure_config=ray.train.FailureConfig(max_failures=resources.max_failures,
                                                       controller_failure_limit=resources.controller_failure_limit()),  # type: ignore[call-arg]
            ),
        )
        try:
            with start_timeout(resources.start_timeout_s()), sigint_kept():
                trainer.fit()
        except Exception as e:
            if not _timed_out_starting_workers(e):
                return e
            failure = resources.waited_too_long()
            failure.__cause__ = e
            return failure
    return None


@contextmanager
def start_timeout(seconds: int) -> Iterator[None]:
    """Ray Train's worker-start limit for the Train runs this process starts meanwhile.

    Set in this process's environment because that is where `fit()` reads it, to hand it to the
    run's controller (the process that waits); the previous value comes back afterwards. One
    process runs one `fit()` at a time here (a trial driver's actor, the sweep's own process)."""
    previous = os.environ.get(START_TIMEOUT_VARIABLE)
    os.environ[START_TIMEOUT_VARIABLE] = str(seconds)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(START_TIMEOUT_VARIABLE, None)
        else:
            os.environ[START_TIMEOUT_VARIABLE] = previous


def _timed_out_starting_workers(error: BaseException) -> bool:
    """Whether `fit()` gave up waiting for its workers' resources, after Train's retries.

    Train raises a `ControllerError` around its `WorkerGroupStartupTimeoutError`; that class lives
    in an internal module of Ray Train, so it is matched by name (a move would not break this)."""
    failure = getattr(error, "controller_failure", None)
    return isinstance(error, ray.train.ControllerError) and type(failure).__name__ == "WorkerGroupStartupTimeoutError"


def last_line(error: BaseException) -> str:
    """What a Train error says: it wraps the worker's traceback, whose last line names the cause."""
    text = str(error).strip()
    return text.splitlines()[-1] if text else ""


def lean_torch_trainer(*args: Any, **kwargs: Any) -> TorchTrainer:
    """A `TorchTrainer` that starts no Ray Data actor when it has no datasets.

    Train creates the `DatasetManager` of its Ray Data integration even for a trainer without
    datasets: one more process per trial, importing Ray Data on the CPUs the trials train on.
    `benchmarks/sweep_overhead.py` measures what dropping it saves."""
    return _LeanTorchTrainer(*args, **kwargs)


class _LeanTorchTrainer(TorchTrainer):
    def _create_default_callbacks(self) -> list[Any]:
        # Train v2's DataParallelTrainer method; mypy sees v1's TorchTrainer (see run_train)
        callbacks = super()._create_default_callbacks()  # type: ignore[misc]
        if self.datasets:
            return callbacks
        try:  # an internal of Ray Train: where it has moved, nothing is dropped
            from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
        except ImportError:
            return callbacks
        return [c for c in callbacks if not isinstance(c, DatasetsCallback)]


# Seconds between two looks at the relay file: a report reaches Tune at most this late.
POLL_S = 0.1


class ReportRelay(ray.train.UserCallback):
    """Rank 0's reports, from the Train controller to the trial driver, through a file.

    Ray's `TuneReportCallback` carries them through a `ray.util.queue.Queue`, an actor of its
    own. The controller always runs on the node of the driver that started it (Ray Train pins it
    there with a node label selector), so a file on that node does the same without a process.
    The controller appends one JSON line per report; `forward_reports` hands each complete line
    to Tune.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        record = dict(metrics[0])  # rank 0's, as TuneReportCallback does
        if checkpoint is not None:
            record["checkpoint_path"] = checkpoint.path
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")


def forward_reports(path: str | Path, report: Callable[[dict[str, Any]], None], done: threading.Event) -> None:
    """Call `report` with every record appended to `path`, in order, until `done` is set.

    After `done` is set it reads once more, so a record written before the run ended is never
    lost. Partial lines (a write in progress) wait for the next look.
    """
    offset, pending = 0, b""
    while True:
        finished = done.is_set()  # read first, look after: nothing written before `done` is missed
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        offset += len(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                report(json.loads(line))
        if finished:
            return
        done.wait(POLL_S)


@contextmanager
def relayed_reports(report: Callable[[dict[str, Any]], None]) -> Iterator[ReportRelay]:
    """A `ReportRelay` for one Train run's `RunConfig.callbacks`, with a thread that hands each of
    its records to `report` while the caller waits in `fit()` (Tune's report blocks until Tune
    takes the result, so it cannot run on the thread inside `fit()`). On exit the last records
    are delivered and the relay file removed."""
    relay_dir = tempfile.mkdtemp(prefix="drydock-reports-")  # this node's: the controller's too
    path = os.path.join(relay_dir, "reports.jsonl")
    done = threading.Event()
    thread = threading.Thread(target=forward_reports, args=(path, report, done), daemon=True)
    thread.start()
    try:
        yield ReportRelay(path)
    finally:
        done.set()
        thread.join()
        shutil.rmtree(relay_dir, ignore_errors=True)


@contextmanager
def sigint_kept() -> Iterator[None]:
    """Train v2's `fit()` on the main thread (the teacher fine-tuned on the workers) installs a
    SIGINT handler that aborts its controller and never removes it (`_register_sigint_handler`,
    ray/train/v2/api/data_parallel_trainer.py, Ray 2.60): a later Ctrl-C, in the search or the
    select stage, went to a finished controller and was swallowed, the third one exiting 0."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
