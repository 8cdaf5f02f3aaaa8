"""How drydock runs one Ray Train job: the only place a `TorchTrainer` is built.

Two callers, one shape: a trial's driver (a Tune actor, `pipeline.search.driver`) and the teacher
stage on workers (`pipeline.search.teacher`). Both want the spec's workers, GPUs and CPUs per
worker, `train.keep_checkpoints` kept checkpoints (the latest is the resume point of a retry),
Train's retries, the reports relayed to the caller while `fit()` blocks, and none of the actors
drydock does not use.

Imported by the trial driver, so it imports nothing heavier than Ray Train (and the torch that
`ray.train.torch` brings); `tests/unit/search/test_driver.py` checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray.train
from ray.train.torch import TorchTrainer

from pipeline.search.relay import relayed_reports

if TYPE_CHECKING:
    from pipeline.config import SweepSpec

# How often Train's controller may be restarted within one run; a bound keeps a broken node from
# retrying forever (worker failures are `max_failures`, the spec's).
CONTROLLER_FAILURE_LIMIT = 3


@dataclass(frozen=True)
class TrainResources:
    """What one Train run of the sweep gets, read once from the validated spec."""

    num_workers: int
    use_gpu: bool
    cpus_per_worker: float
    gpus_per_worker: float
    max_failures: int
    keep_checkpoints: int = 1  # train.keep_checkpoints (the spec's default)

    @classmethod
    def of(cls, spec: SweepSpec) -> TrainResources:
        r = spec.resources
        return cls(r.workers_per_trial, r.use_gpu, r.cpus_per_worker, r.gpus_per_worker, spec.search.max_failures,
                   spec.train.keep_checkpoints)

    def per_worker(self) -> dict[str, float]:
        return {"CPU": self.cpus_per_worker, **({"GPU": self.gpus_per_worker} if self.use_gpu else {})}


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
    """
    with relayed_reports(on_report) as relay:
        trainer = lean_torch_trainer(
            worker_fn,
            train_loop_config=config,
            scaling_config=ray.train.ScalingConfig(
                num_workers=resources.num_workers, use_gpu=resources.use_gpu, resources_per_worker=resources.per_worker(),
            ),
            run_config=ray.train.RunConfig(
                name=name, storage_path=storage_path, callbacks=[relay],
                # No score attribute: Train keeps the `num_to_keep` latest in the order reported,
                # and never deletes the latest (the one `ray.train.get_checkpoint()` resumes from).
                checkpoint_config=ray.train.CheckpointConfig(num_to_keep=resources.keep_checkpoints),
                failure_config=ray.train.FailureConfig(max_failures=resources.max_failures,
                                                       controller_failure_limit=CONTROLLER_FAILURE_LIMIT),
            ),
        )
        try:
            trainer.fit()
        except Exception as e:
            return e
    return None


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
        callbacks = super()._create_default_callbacks()
        if self.datasets:
            return callbacks
        try:  # an internal of Ray Train: where it has moved, nothing is dropped
            from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
        except ImportError:
            return callbacks
        return [c for c in callbacks if not isinstance(c, DatasetsCallback)]
