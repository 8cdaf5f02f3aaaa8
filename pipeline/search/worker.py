"""The Ray Train worker: one process of one trial (rank r of N).

It receives plain data (the spec as a dict, the trial, paths), validates the spec again into
the typed config (a worker never trusts an unvalidated dict), loads the tokenized data and the
fine-tuned teacher from the work directory's cache (a trial never re-tokenizes or re-fine-tunes),
runs the loop under DDP or DeepSpeed, reports every evaluation with a checkpoint, and rank 0
exports the student into the trial's folder.
"""

from __future__ import annotations

import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray.train
import torch

from pipeline.config import spec_from_dict
from pipeline.search.outcome import write_outcome
from pipeline.search.space import TrialSpec
from pipeline.training import engine, loop


class RayReporter:
    """Every rank reports every evaluation; rank 0's metrics reach Tune (`pipeline.search.relay.ReportRelay`).

    DeepSpeed's checkpoint save is a collective, so every rank writes its part into its own
    temporary folder and Ray merges the ranks' folders into one checkpoint.
    """

    def report(self, metrics: dict[str, float], save_checkpoint: Callable[[Path], None] | None) -> None:
        if save_checkpoint is None:
            ray.train.report(metrics)
            return
        with tempfile.TemporaryDirectory() as tmp:
            save_checkpoint(Path(tmp))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp))

    def resume_from(self) -> Path | None:
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return None
        path = Path(checkpoint.to_directory())
        return path if (path / loop.CHECKPOINT_FILE).is_file() else None


def _distributed(resources: dict[str, Any], preset: dict[str, Any] | None) -> engine.Distributed:
    context = ray.train.get_context()
    world, rank = context.get_world_size(), context.get_world_rank()
    if resources["use_gpu"] and torch.cuda.is_available():
        device = ray.train.torch.get_device()
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    # Distributed applies the one rule of when DDP is plain training (engine.effective_strategy)
    return engine.Distributed(
        strategy=resources["strategy"], world_size=world, rank=rank, device=device,
        zero_stage=resources["deepspeed"]["zero_stage"], deepspeed_preset=preset,
        node_id=ray.get_runtime_context().get_node_id(),
    )


def train_worker(config: dict[str, Any]) -> None:
    """Ray Train's `train_loop_per_worker`."""
    from pipeline.prepare.stage import Prepared, prepare
    from pipeline.training.teacher import TeacherResult
    from pipeline.training.trial import run_trial

    trial = TrialSpec.from_dict(config["trial"])
    workdir, output_dir = Path(config["workdir"]), Path(config["output_dir"])
    rank = ray.train.get_context().get_world_rank()
    try:
        spec = spec_from_dict(config["spec"])
        if config.get("threads"):
            torch.set_num_threads(int(config["threads"]))
        dist = _distributed(spec.resources.model_dump(), config.get("deepspeed_preset"))
        teacher = None
        if config.get("teacher"):
            t = config["teacher"]
            teacher = TeacherResult(Path(t["path"]), t["metrics"], True, t["key"])
        prepared: Prepared = prepare(spec, workdir)
        outcome = run_trial(
            spec, trial.method, trial.params, trial.seed, workdir, output_dir,
            prepared=prepared, teacher=teacher, dist=dist, reporter=RayReporter(), log=lambda _: None,
        )
    except loop.TrainingDiverged as e:
        # Not retryable (it would diverge again): record it and end the trial normally.
        if rank == 0:
            write_outcome(output_dir, {"status": "failed", "error": str(e)})
        return
    except Exception as e:
        if rank == 0:
            write_outcome(output_dir, {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        raise
    if rank == 0:
        write_outcome(output_dir, {"status": "finished", **outcome.metrics, "student_path": str(outcome.student_path)})


def teacher_worker(config: dict[str, Any]) -> None:
    """Ray Train's `train_loop_per_worker` for the teacher stage (`pipeline.search.teacher`): every
    rank fine-tunes together under the spec's strategy; rank 0 writes the teacher cache. Every
    evaluation is reported with a checkpoint, so the driver can show progress and a retry resumes.
    A failure propagates, so Train retries it and the driver stops the sweep with the reason; a
    divergence is not retried (it would diverge again): rank 0 writes it to `outcome_dir`."""
    from pipeline.prepare.stage import prepare
    from pipeline.training.teacher import TeacherDiverged, finetune_teacher

    spec = spec_from_dict(config["spec"])
    workdir = Path(config["workdir"])
    torch.set_num_threads(int(config["threads"]))
    dist = _distributed(spec.resources.model_dump(), config.get("deepspeed_preset"))
    try:
        finetune_teacher(spec, prepare(spec, workdir), workdir, dist, RayReporter())
    except TeacherDiverged as e:
        if dist.is_main:
            write_outcome(Path(config["outcome_dir"]), {"status": "failed", "error": str(e)})
