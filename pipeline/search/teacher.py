"""The teacher stage on Ray Train workers, with a trial's resources, instead of in the driver.

Why: the driver runs where `drydock sweep` was started — on a cluster, the Ray head, which has no
GPU and usually no CPUs for work (`num-cpus: 0`). A bert-base teacher fine-tuned there takes
hours; on the workers the trials use (their GPUs, DDP or DeepSpeed, bf16) it takes minutes.
`resources.teacher_placement` decides (auto: here when trials use GPUs).

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
from pipeline.training.teacher import TeacherResult, existing_teacher, progress_line, teacher_key


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
    import ray.train

    from pipeline.search.relay import lean_torch_trainer, relayed_reports
    from pipeline.search.worker import teacher_worker

    r = spec.resources
    key = teacher_key(spec, prepared)
    per_worker = {"CPU": r.cpus_per_worker, **({"GPU": r.gpus_per_worker} if r.use_gpu else {})}
    strategy = r.strategy if (r.workers_per_trial > 1 or r.strategy == "deepspeed") else "one process"
    log(f"teacher: fine-tuning {spec.teacher.model} on {spec.task.name} on {r.workers_per_trial} Train worker(s) "
        f"({strategy}, {'GPU' if r.use_gpu else 'CPU'}), cached as {workdir / 'teachers' / key}")
    # a divergence is written here by rank 0 instead of raised (a Train retry would diverge again)
    outcome_dir = workdir / "teachers" / f".run-{key}"
    shutil.rmtree(outcome_dir, ignore_errors=True)
    # every evaluation reaches the log while fit() waits: a GPU teacher can take many minutes
    with relayed_reports(lambda m: log(progress_line(m))) as relay:
        trainer = lean_torch_trainer(
            teacher_worker,
            train_loop_config={"spec": spec_to_dict(spec), "workdir": str(workdir), "deepspeed_preset": deepspeed_preset,
                               "threads": max(1, int(r.cpus_per_worker)), "outcome_dir": str(outcome_dir)},
            scaling_config=ray.train.ScalingConfig(num_workers=r.workers_per_trial, use_gpu=r.use_gpu, resources_per_worker=per_worker),
            run_config=ray.train.RunConfig(
                name=f"teacher-{key}", storage_path=storage_path, callbacks=[relay],
                checkpoint_config=ray.train.CheckpointConfig(num_to_keep=1),
                failure_config=ray.train.FailureConfig(max_failures=spec.search.max_failures, controller_failure_limit=3),
            ),
        )
        try:
            trainer.fit()
        except Exception as e:  # Train's error wraps the worker's traceback; its last line says what
            text = str(e).strip()
            reason = text.splitlines()[-1] if text else type(e).__name__
            raise DrydockError(f"teacher: fine-tuning on the Train workers failed: {reason}") from None
    outcome = read_outcome(outcome_dir)
    shutil.rmtree(outcome_dir, ignore_errors=True)
    if outcome is not None and outcome.get("status") == "failed":
        raise DrydockError(outcome["error"])
    result = existing_teacher(spec, prepared, workdir)
    if result is None:
        raise DrydockError(f"teacher: the Train workers finished but {workdir / 'teachers' / key} holds no teacher: "
                           "--workdir must be one filesystem shared by every node")
    return TeacherResult(result.path, result.metrics, reused=False, key=result.key)

