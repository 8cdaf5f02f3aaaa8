"""The teacher stage of a sweep: in the driver's process, or on Ray Train workers with a trial's
resources.

Why workers: the driver runs where `drydock sweep` was started — on a cluster, the Ray head, which
has no GPU and usually no CPUs for work (`num-cpus: 0`). A bert-base teacher fine-tuned there
takes hours; on the workers the trials use (their GPUs, DDP or DeepSpeed, bf16) it takes minutes.
`resources.teacher_placement` decides (auto: there when trials use GPUs).

The result is the same cache the driver would write (`<workdir>/teachers/<key>`, rank 0 writes
it), so the work directory must be shared by every node — which trials already require.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.config import SweepSpec, spec_to_dict
from pipeline.errors import DrydockError
from pipeline.prepare.stage import Prepared
from pipeline.search.outcome import read_outcome
from pipeline.search.trainer import TrainResources, last_line, run_train
from pipeline.search.worker import teacher_worker
from pipeline.training.engine import effective_strategy
from pipeline.training.teacher import TeacherResult, ensure_teacher, existing_teacher, progress_line, teacher_key


def teacher_stage(
    spec: SweepSpec,
    prepared: Prepared,
    workdir: Path,
    *,
    storage_path: str,
    deepspeed_preset: dict[str, Any] | None,
    log: Callable[[str], None] = print,
) -> TeacherResult:
    """The fine-tuned teacher, from the cache or trained once for every trial and later sweep.

    Needed even when no method distils from it: retention and speedup are measured against it."""
    if spec.resources.teacher_on_workers() and existing_teacher(spec, prepared, workdir) is None:
        return finetune_teacher_on_workers(spec, prepared, workdir, storage_path=storage_path,
                                           deepspeed_preset=deepspeed_preset, log=log)
    return ensure_teacher(spec, prepared, workdir, log=log)


def finetune_teacher_on_workers(
    spec: SweepSpec,
    prepared: Prepared,
    workdir: Path,
    *,
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
        f"cached as {workdir / 'teachers' / key}")
    # a divergence is written here by rank 0 instead of raised (a Train retry would diverge again)
    outcome_dir = workdir / "teachers" / f".run-{key}"
    shutil.rmtree(outcome_dir, ignore_errors=True)
    config = {"spec": spec_to_dict(spec), "workdir": str(workdir), "deepspeed_preset": deepspeed_preset,
              "outcome_dir": str(outcome_dir)}
    # every evaluation reaches the log while fit() waits: a GPU teacher can take many minutes
    failure = run_train(teacher_worker, config, TrainResources.of(spec), name=f"teacher-{key}",
                        storage_path=storage_path, on_report=lambda m: log(progress_line(m)))
    if failure is not None:
        reason = last_line(failure) or type(failure).__name__
        raise DrydockError(f"teacher: fine-tuning on the Train workers failed: {reason}")
    outcome = read_outcome(outcome_dir)
    shutil.rmtree(outcome_dir, ignore_errors=True)
    if outcome is not None and outcome.get("status") == "failed":
        raise DrydockError(outcome["error"])
    result = existing_teacher(spec, prepared, workdir)
    if result is None:
        raise DrydockError(f"teacher: the Train workers finished but {workdir / 'teachers' / key} holds no teacher: "
                           "--workdir must be one filesystem shared by every node")
    return TeacherResult(result.path, result.metrics, reused=False, key=result.key)
