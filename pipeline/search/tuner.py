"""The sweep's one `Tuner`: its trainable, its scheduler and its time axis, new or restored.

One Tuner grids over the concrete trial list of `pipeline.search.space` (every method together,
and a restored sweep sees exactly the same trials). Its trainable is the thin trial driver of
`pipeline.search.driver`, which reserves no CPU: the trial's Train workers hold the resources.
Why the driver's reservation and the actor reuse are set as they are: `docs/search-on-ray.md`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from pipeline.config import SweepSpec
from pipeline.search.driver import SearchContext, trial_driver
from pipeline.search.space import TrialSpec
from pipeline.search.state import RunStorage, SweepRun

# ASHA's time axis: what the training loop reports as `progress`, the fraction of its labeled
# training a trial has done (pipeline.training.loop). Every method's trials meet at the same
# rungs, however their phases are cut (MiniLM's unlabeled distillation, a max_steps cap).
TIME_ATTR = "progress"
# Tune rejects {"cpu": 0}, and a fraction of a CPU can deadlock two workers on two CPUs.
DRIVER_RESOURCES = {"cpu": 0, "memory": 1}


def scheduler(spec: SweepSpec, metric_key: str) -> TrialScheduler:
    """The spec's scheduler. ASHA's `search.asha.grace_period` is given in epochs of
    `train.epochs` and converted here, the one place that knows the time axis is a fraction."""
    if spec.search.scheduler != "asha":
        return FIFOScheduler()
    epochs = spec.train.epochs
    return ASHAScheduler(
        time_attr=TIME_ATTR, metric=metric_key, mode="max", max_t=1.0,
        grace_period=min(spec.search.asha.grace_period, epochs) / epochs,
        reduction_factor=spec.search.asha.reduction_factor,
    )


def make_tuner(
    spec: SweepSpec,
    trials: Sequence[TrialSpec],
    context: SearchContext,
    storage: RunStorage,
    *,
    concurrency: int,
    callback: tune.Callback,
    run: SweepRun,
    log: Callable[[str], None],
) -> tune.Tuner:
    """A new Tuner, or, resuming, the interrupted one restored (its finished trials are kept)."""
    trainable = tune.with_resources(tune.with_parameters(trial_driver, shared=context), DRIVER_RESOURCES)
    param_space: dict[str, Any] = {"trial": tune.grid_search([t.to_dict() for t in trials])}
    if run.resuming and tune.Tuner.can_restore(storage.experiment_path):
        log(f"resume: continuing run {run.paths.run_id} (finished trials are kept)")
        tuner = tune.Tuner.restore(storage.experiment_path, trainable=trainable, resume_errored=True, param_space=param_space)
        tuner._local_tuner._run_config.callbacks = [callback]  # callbacks are not restored: attach ours again
        return tuner
    return tune.Tuner(
        trainable,
        param_space=param_space,
        # Tune reuses a finished trial's actor for the next trial, but not safely one a scheduler
        # stopped (docs/search-on-ray.md): only FIFO never stops a trial mid-run.
        tune_config=tune.TuneConfig(scheduler=scheduler(spec, context.metric_key), max_concurrent_trials=concurrency,
                                    reuse_actors=spec.search.scheduler == "fifo"),
        run_config=tune.RunConfig(
            name=storage.tune_name, storage_path=storage.root, callbacks=[callback],
            # Train retries lost workers inside a trial; Tune retries a trial whose driver died
            # (its node was lost), and the new driver's Train run, same name and storage, resumes
            # from the trial's last checkpoint. A trial whose training raises is not a Tune
            # failure: its driver records it and reports normally.
            failure_config=tune.FailureConfig(max_failures=spec.search.max_failures), verbose=0,
        ),
    )
