"""The teacher stage of a sweep: in the driver's process, or on Ray Train workers with a trial's
resources.

Why workers: the driver runs where `drydock sweep` was started — on a cluster, the Ray head, which
has no GPU and usually no CPUs for work (`num-cpus: 0`). A bert-base teacher fine-tuned there
takes hours; on the workers the trials use (their GPUs, DDP or DeepSpeed, bf16) it takes minutes.
`resources.teacher_placement` decides (auto: there when trials use GPUs).

The result is the same cache the driver would write (`teachers/<key>` of the work location: rank
0 writes it on its node and pushes it there), and every trial fetches it from there
(`pipeline.storage`): no node needs another's disk.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from pipeline.config import SweepSpec
from pipeline.errors import DrydockError
from pipeline.prepare.cache import folder_digest
from pipeline.prepare.stage import Prepared
from pipeline.search.outcome import read_outcome
from pipeline.search.sealed import Sealed
from pipeline.search.trainer import TrainResources, last_line, run_train
from pipeline.search.worker import teacher_worker
from pipeline.storage import WorkStore
from pipeline.training.engine import effective_strategy
from pipeline.training.teacher import TeacherResult, ensure_teacher, existing_teacher, progress_line, teacher_key
from pipeline.workdir import TEACHERS_DIR


def teacher_stage(
    spec: SweepSpec,
    prepared: Prepared,
    store: WorkStore,
    *,
    folders: dict[str, str],
    storage_path: str,
    deepspeed_preset: dict[str, Any] | None,
    log: Callable[[str], None] = print,
) -> tuple[TeacherResult, str]:
    """The fine-tuned teacher, from the cache or trained once for every trial and later sweep,
    and where a Train worker finds it (`WorkStore.localize` takes it: a key of the store, or
    this node's path when the work location is a folder).

    Needed even when no method distils from it: retention and speedup are measured against it."""
    workdir = store.local
    if not spec.teacher.finetuned:  # cached in the store by an earlier sweep, maybe on another machine
        store.fetch(f"teachers/{teacher_key(spec, prepared)}")
    if spec.resources.teacher_on_workers() and existing_teacher(spec, prepared, workdir) is None:
        result = finetune_teacher_on_workers(spec, prepared, store, folders=folders, storage_path=storage_path,
                                             deepspeed_preset=deepspeed_preset, log=log)
    else:
        result = ensure_teacher(spec, prepared, workdir, log=log)
    return result, publish_teacher(store, result)


def publish_teacher(store: WorkStore, teacher: TeacherResult) -> str:
    """Put the teacher where every node finds it; returns its reference for the workers. A given
    fine-tuned teacher (`teacher.finetuned`, a folder of this machine) goes in by content."""
    if not store.is_remote:
        return str(teacher.path)
    key = f"teachers/{teacher.key}" if teacher.key != "given" else f"teachers/given-{folder_digest(teacher.path)}"
    if not store.exists(key):
        if teacher.key == "given":
            shutil.copytree(teacher.path, store.path(key), dirs_exist_ok=True)
        store.push(key)
    return key


def finetune_teacher_on_workers(
    spec: SweepSpec,
    prepared: Prepared,
    store: WorkStore,
    *,
    folders: dict[str, str],
    storage_path: str,
    deepspeed_preset: dict[str, Any] | None,
    log: Callable[[str], None] = print,
) -> TeacherResult:
    """One Ray Train run that fine-tunes and caches the teacher; returns the cached teacher."""
    r = spec.resources
    key = teacher_key(spec, prepared)
    strategy = effective_strategy(r.strategy, r.workers_per_trial)
    log(f"teacher: fine-tuning {spec.teacher.model} on {spec.task.name} on {r.workers_per_trial} Train worker(s) "
        f"({'one process' if strategy == 'none' else strategy}, {'GPU' if r.use_gpu else 'CPU'}), "
        f"cached as {store.uri(f'{TEACHERS_DIR}/{key}')}")
    # a divergence is written here by rank 0 instead of raised (a Train retry would diverge again)
    outcome_key = f"teachers/.run-{key}"
    store.delete(outcome_key)  # an earlier run's divergence must not speak for this one
    config = {"spec": Sealed(spec), "workdir": store.location, "deepspeed_preset": deepspeed_preset,
              "outcome_dir": outcome_key, "prepared": folders, "teacher_key": key}
    # every evaluation reaches the log while fit() waits: a GPU teacher can take many minutes
    failure = run_train(teacher_worker, config, TrainResources.of(spec), name=f"teacher-{key}",
                        storage_path=storage_path, on_report=lambda m: log(progress_line(m)))
    if failure is not None:
        reason = last_line(failure) or type(failure).__name__
        raise DrydockError(f"teacher: fine-tuning on the Train workers failed: {reason}")
    store.fetch(f"{outcome_key}/outcome.json", fresh=True)
    outcome = read_outcome(store.path(outcome_key))
    store.delete(outcome_key)
    if outcome is not None and outcome.get("status") == "failed":
        raise DrydockError(outcome["error"])
    store.fetch(f"teachers/{key}")
    result = existing_teacher(spec, prepared, store.local)
    if result is None:
        raise DrydockError(f"teacher: the Train workers finished but {store.uri(f'{TEACHERS_DIR}/{key}')} holds no teacher: "
                           "a --workdir folder must be one filesystem shared by every node (or give a URI: s3://…, file://…)")
    return TeacherResult(result.path, result.metrics, reused=False, key=result.key)
