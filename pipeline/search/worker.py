"""The Ray Train worker: one process of one trial (rank r of N).

It receives plain data (the validated spec's dump, the trial, paths) and validates the spec where
it lands (a worker never trusts an unvalidated dict), loads the tokenized data and the fine-tuned
teacher from the work directory's cache (a trial never re-tokenizes or re-fine-tunes), runs the
loop under DDP or DeepSpeed, reports every evaluation with a checkpoint, and rank 0 exports the
student into the trial's folder.
"""

from __future__ import annotations

import json
import os
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import ray.train
import torch

from pipeline.config import ResourcesConfig, SweepSpec, spec_from_dict
from pipeline.errors import DrydockError
from pipeline.prepare.stage import prepare
from pipeline.search.outcome import write_outcome
from pipeline.search.space import TrialSpec
from pipeline.training import loop
from pipeline.training.engine import Distributed
from pipeline.training.teacher import TeacherDiverged, TeacherResult, finetune_teacher
from pipeline.training.trial import run_trial


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


def _landed(config: dict[str, Any]) -> tuple[SweepSpec, Distributed]:
    """The spec, validated once here, and this process's place in the run."""
    spec = spec_from_dict(config["spec"])
    torch.set_num_threads(max(1, int(spec.resources.cpus_per_worker)))
    return spec, _distributed(spec.resources, config.get("deepspeed_preset"))


def _distributed(resources: ResourcesConfig, preset: dict[str, Any] | None) -> Distributed:
    context = ray.train.get_context()
    world, rank = context.get_world_size(), context.get_world_rank()
    if resources.use_gpu:
        require_cuda_on_every_rank(world, rank)
        device = ray.train.torch.get_device()
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    # Distributed applies the one rule of when DDP is plain training (engine.effective_strategy)
    return Distributed(
        strategy=resources.strategy, world_size=world, rank=rank, device=device,
        zero_stage=resources.deepspeed.zero_stage, deepspeed_preset=preset,
        node_id=ray.get_runtime_context().get_node_id(),  # which machine, for cluster debugging
    )


def require_cuda_on_every_rank(world_size: int, rank: int) -> None:
    """With `use_gpu`, every rank must see CUDA (the sweep checked one GPU node; this one may
    differ). If one does not, every rank raises the same error, naming the ranks without it.

    Agreed by every rank before any collective of the trial: a rank that stopped alone left the
    others blocked in their first NCCL collective until its timeout (30 minutes, then Train retried
    the trial), and only rank 0 writes the trial's outcome, so a rank k != 0 left nothing recorded.
    (`tests/unit/search/test_worker_cuda.py`)"""
    mine = None
    if not torch.cuda.is_available():
        mine = f"rank {rank} ({ray.util.get_node_ip_address()}) sees no CUDA device with torch {torch.__version__}"
    missing = [problem for problem in _gathered("cuda", mine, world_size, rank) if problem]
    if missing:
        raise DrydockError(f"resources.use_gpu: the Train workers were given GPUs, but {'; '.join(missing)}; "
                           "a trial will not train on the CPU")


def _gathered(name: str, item: str | None, world_size: int, rank: int) -> list[str | None]:
    """Every rank's `item`, in rank order: every rank calls it at the same point (a collective).

    Exchanged through the rendezvous store of the trial's process group (Train's `env://` init
    sets MASTER_ADDR and MASTER_PORT), which NCCL's start-up has just used: not through NCCL,
    which needs the CUDA a rank may lack, nor through a gloo group, which needs a network setup
    (GLOO_SOCKET_IFNAME) that a GPU cluster's NCCL does not. Each Train run has its own store."""
    if world_size == 1 or not torch.distributed.is_initialized():
        return [item]
    store = torch.distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    store.set(f"drydock/{name}/{rank}", json.dumps(item))
    return [json.loads(store.get(f"drydock/{name}/{r}")) for r in range(world_size)]


def train_worker(config: dict[str, Any]) -> None:
    """Ray Train's `train_loop_per_worker` for a trial."""
    trial = TrialSpec.from_dict(config["trial"])
    workdir, output_dir = Path(config["workdir"]), Path(config["output_dir"])
    rank = ray.train.get_context().get_world_rank()
    try:
        spec, dist = _landed(config)
        t = config["teacher"]
        teacher = TeacherResult(Path(t["path"]), t["metrics"], True, t["key"])
        outcome = run_trial(
            spec, trial.method, trial.params, trial.seed, workdir, output_dir,
            prepared=prepare(spec, workdir), teacher=teacher, dist=dist, reporter=RayReporter(), log=lambda _: None,
        )  # the export is verified by the sweep's recorder, in one long-lived fresh process
    except (loop.TrainingDiverged, DrydockError) as e:
        # Not retryable (it would diverge again; a setting or input is wrong): record it and end
        # the trial normally.
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
    spec, dist = _landed(config)
    workdir = Path(config["workdir"])
    try:
        finetune_teacher(spec, prepare(spec, workdir), workdir, dist, RayReporter())
    except TeacherDiverged as e:
        if dist.is_main:
            write_outcome(Path(config["outcome_dir"]), {"status": "failed", "error": str(e)})
