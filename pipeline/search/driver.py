"""The per-trial driver: a Tune function trainable that runs one trial as a Ray Train job.

Kept apart from `pipeline.sweep` and `pipeline.search.worker` on purpose: Tune starts one actor per
trial that imports this module, and it needs only Ray (and torch, which `ray.train.torch`
imports). Reached through `pipeline.sweep` and `pipeline.search.worker`, as before, it also pulled in
transformers and every method: the trial actor's imports took 4.7 s of CPU then, 2.2 s now,
per trial, on the CPUs the trials train on. `train_worker` below is a shim for the same
reason: the heavy `pipeline.search.worker` is imported inside the Train worker only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.search.outcome import read_outcome, write_outcome
from pipeline.search.space import TrialSpec

NAN = float("nan")


def train_worker(config: dict[str, Any]) -> None:
    """Ray Train's per-worker function: the real one, imported where it runs."""
    from pipeline.search.worker import train_worker as run

    run(config)


def trial_driver(config: dict[str, Any], shared: dict[str, Any]) -> None:
    """Tune trainable: one TorchTrainer for one trial, then a final report of its outcome."""
    import ray.train
    from ray import tune

    from pipeline.search.relay import lean_torch_trainer, relayed_reports

    trial = TrialSpec.from_dict(config["trial"])
    trial_dir = Path(shared["trials_dir"]) / trial.key
    outcome = read_outcome(trial_dir)
    if outcome is None or outcome.get("status") != "finished":  # a finished trial is never re-run
        resources = shared["spec"]["resources"]
        per_worker = {"CPU": resources["cpus_per_worker"]}
        if resources["use_gpu"]:
            per_worker["GPU"] = resources["gpus_per_worker"]
        error = None
        # A trial Tune stops is still in fit() (reports reach Tune from the relay's thread): its
        # actor must not be reused (run_sweep turns reuse off under ASHA), it is killed, and the
        # Train run with it.
        with relayed_reports(tune.report) as relay:
            trainer = lean_torch_trainer(
                train_worker,
                train_loop_config={
                    "spec": shared["spec"], "trial": trial.to_dict(), "workdir": shared["workdir"],
                    "output_dir": str(trial_dir), "teacher": shared["teacher"], "deepspeed_preset": shared["deepspeed_preset"],
                    "threads": max(1, int(resources["cpus_per_worker"])),
                },
                scaling_config=ray.train.ScalingConfig(
                    num_workers=resources["workers_per_trial"], use_gpu=resources["use_gpu"], resources_per_worker=per_worker
                ),
                run_config=ray.train.RunConfig(
                    name=f"train-{trial.key}",  # unique and stable: a retry or restore resumes from it
                    storage_path=shared["train_storage"],
                    callbacks=[relay],
                    checkpoint_config=ray.train.CheckpointConfig(num_to_keep=1),
                    failure_config=ray.train.FailureConfig(max_failures=shared["max_failures"], controller_failure_limit=3),
                ),
            )
            try:
                trainer.fit()
            except Exception as e:  # the worker's own outcome.json says more when it got that far
                error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        outcome = read_outcome(trial_dir)
        if outcome is None:  # it failed before the worker could say why: record it here
            outcome = {"status": "failed", "error": error or "the trial ended without an outcome"}
            write_outcome(trial_dir, outcome)
    final = {"drydock_final": 1.0, shared["metric_key"]: _number(outcome.get("metric"))}
    tune.report(final)


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and v is not None else NAN
