"""The per-trial driver: a Tune function trainable that runs one trial as a Ray Train job.

Kept light on purpose: Tune starts one actor per trial that imports this module, on the CPUs the
trials train on, and it needs only Ray (and torch, which `ray.train.torch` imports). Reached
through `pipeline.search.worker`, it would pull in transformers and every method too, per trial
(`benchmarks/RESULTS.md` has the measured cost; `tests/unit/search/test_driver.py` keeps it
out). So `train_worker` below is a shim: the heavy worker module is imported inside the Train
worker only, and the driver never opens the spec nor the trial's parameters (unpickling either
imports the method): both travel sealed (`pipeline.search.sealed`) to the worker, which opens
them as they were validated, and the driver reads what it needs itself from `SearchContext`,
typed values the orchestrator took from the validated spec, and the trial's key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray
from ray import tune

from pipeline.search.outcome import OUTCOME_FILE, read_outcome, write_outcome
from pipeline.search.sealed import Sealed
from pipeline.search.space import key_of
from pipeline.search.trainer import TrainResources, last_line, run_train
from pipeline.storage import WorkStore

if TYPE_CHECKING:
    from pipeline.config import SweepSpec

NAN = float("nan")


@dataclass(frozen=True)
class SearchContext:
    """What every trial of one sweep run shares, given to each trial's driver by Tune."""

    spec: Sealed[SweepSpec]  # the validated spec, opened by the workers only
    resources: TrainResources
    workdir: str  # the work location (`pipeline.storage`): a folder, or a URI no node needs to mount
    trials_dir: str  # key in it: each trial's student/, metrics.json and outcome.json under <trials_dir>/<key>
    train_storage: str  # the Train runs' storage path (their checkpoints: a retry's resume point)
    teacher: dict[str, Any]  # the cached teacher: {"path" (`WorkStore.localize` reads it), "metrics", "key"}
    prepared: dict[str, str]  # the cache folders of the tokenized data and tokenizer (`Prepared.folders`)
    metric_key: str  # the evaluation metric the scheduler reads, e.g. "eval/accuracy"
    deepspeed_preset: dict[str, Any] | None  # read where drydock runs; the workers may not see the file
    in_actor: bool = False  # resources.trial_runner: tune-actor (the trial trains in this actor, no Train job)


def train_worker(config: dict[str, Any]) -> None:
    """Ray Train's per-worker function: the real one, imported where it runs."""
    from pipeline.search.worker import train_worker as run

    run(config)


def train_here(config: dict[str, Any]) -> None:
    """The trial trained in this actor (`resources.trial_runner: tune-actor`): the worker module is
    imported on the first trial only, when Tune reuses the actor."""
    from pipeline.search.worker import actor_worker

    actor_worker(config)


def trial_driver(config: dict[str, Any], shared: SearchContext) -> None:
    """Tune trainable: one Train run for one trial, then a final report of its outcome."""
    key = key_of(config["trial"])  # a `Trial` (`pipeline.search.space`), passed on as it is
    store = WorkStore.open(shared.workdir)
    trial_key = f"{shared.trials_dir}/{key}"
    outcome = _outcome(store, trial_key)
    if outcome is None or outcome.get("status") != "finished":  # a finished trial is never re-run
        # A trial Tune stops is still in fit() (reports reach Tune from the relay's thread): its
        # actor must not be reused (`pipeline.search.tuner` turns reuse off when trials can be
        # stopped), it is killed, and the Train run with it.
        worker_config = {
            "spec": shared.spec, "trial": config["trial"], "workdir": shared.workdir, "trial_dir": trial_key,
            "teacher": shared.teacher, "prepared": shared.prepared, "deepspeed_preset": shared.deepspeed_preset,
        }
        if shared.in_actor:
            failure = _train_in_actor(worker_config, store, trial_key, outcome, shared.resources.max_failures)
        else:
            failure = run_train(train_worker, worker_config, shared.resources, name=f"train-{key}",
                                storage_path=shared.train_storage, on_report=tune.report)
        outcome = _outcome(store, trial_key)
        if outcome is None:  # it failed before the worker could say why: record it here
            error = f"{type(failure).__name__}: {last_line(failure)}" if failure is not None else None
            outcome = {"status": "failed", "error": error or "the trial ended without an outcome"}
            write_outcome(store.path(trial_key), outcome)
            store.push(f"{trial_key}/{OUTCOME_FILE}")
    # which node drove the trial (its Train controller runs there too, or it trained here), for the trial's run
    driver_node = ray.get_runtime_context().get_node_id()
    tune.report({"drydock_final": 1.0, shared.metric_key: _number(outcome.get("metric")), "driver_node_id": driver_node})


def _train_in_actor(worker_config: dict[str, Any], store: WorkStore, trial_key: str, before: dict[str, Any] | None,
                    max_failures: int) -> Exception | None:
    """The trial trained here; what it raised, once its retries are spent (None: it ended).

    As Train retries a worker: while `search.max_failures` allows, the exception fails this Tune
    trial and Tune retries it from its last checkpoint; the failed outcome the worker wrote counts
    the attempt (`attempt`), so the next try knows. The last one returns the error: the trial
    ends normally with its failed outcome, as a Train job's does (an errored Tune trial would be
    trained again by `--resume`)."""
    try:
        train_here(worker_config)
        return None
    except Exception as e:
        attempt = int((before or {}).get("attempt", 0)) + 1
        if attempt > max_failures:
            return e
        recorded = _outcome(store, trial_key) or {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        write_outcome(store.path(trial_key), {**recorded, "attempt": attempt})
        store.push(f"{trial_key}/{OUTCOME_FILE}")
        raise


def _outcome(store: WorkStore, trial_key: str) -> dict[str, Any] | None:
    """The trial's outcome as the store has it now (its rank 0 may have run on another node)."""
    store.fetch(f"{trial_key}/{OUTCOME_FILE}", fresh=True)
    return read_outcome(store.path(trial_key))


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else NAN
