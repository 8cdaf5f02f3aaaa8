"""The Ray Train worker: one process of one trial (rank r of N).

It receives the validated spec and the trial as the sweep built them (sealed on the way:
`pipeline.search.sealed`; never validated again here), the work location and keys in it, loads the
tokenized data and the fine-tuned teacher from the work location's cache (a trial never
re-tokenizes or re-fine-tunes; on a store without a shared disk they are fetched into this node's
mirror first, `pipeline.storage`), runs the loop under DDP or DeepSpeed, reports every evaluation
with a checkpoint, and rank 0 exports the student into the trial's folder and pushes it, its
outcome last.
"""

from __future__ import annotations

import gc
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

from pipeline.config import ResourcesConfig, SweepSpec
from pipeline.errors import DrydockError
from pipeline.prepare.stage import Prepared, load_prepared
from pipeline.search.outcome import OUTCOME_FILE, write_outcome
from pipeline.search.space import as_trial
from pipeline.storage import WorkStore
from pipeline.training import loop
from pipeline.training.engine import Distributed
from pipeline.training.teacher import TeacherDiverged, TeacherResult, finetune_teacher
from pipeline.training.trial import run_trial


class RayReporter:
    """Every rank reports every evaluation; rank 0's metrics reach Tune (`pipeline.search.trainer.ReportRelay`).

    DeepSpeed's checkpoint save is a collective, so every rank writes its part into its own
    temporary folder and Ray merges the ranks' folders into one checkpoint. `api`: `ray.train`
    for a Train worker, `ray.tune` for a trial trained in its Tune actor
    (`resources.trial_runner: tune-actor`), whose reports and checkpoints go to Tune itself; both
    offer `report`, `Checkpoint` and `get_checkpoint`.
    """

    def __init__(self, api: Any = ray.train) -> None:
        self.api = api

    def report(self, metrics: dict[str, float], save_checkpoint: Callable[[Path], None] | None) -> None:
        if save_checkpoint is None:
            self.api.report(metrics)
            return
        with tempfile.TemporaryDirectory() as tmp:
            save_checkpoint(Path(tmp))
            self.api.report(metrics, checkpoint=self.api.Checkpoint.from_directory(tmp))

    def resume_from(self) -> Path | None:
        checkpoint = self.api.get_checkpoint()
        if checkpoint is None:
            return None
        try:
            path = Path(checkpoint.to_directory())
        except OSError:  # deleted as a newer one registered, after the state Tune restored was saved
            newer = newest_checkpoint_beside(checkpoint)
            if newer is None:
                return None
            path = Path(newer.to_directory())
        return path if (path / loop.CHECKPOINT_FILE).is_file() else None


def newest_checkpoint_beside(checkpoint: Any) -> Any | None:
    """The newest `checkpoint_*` folder of the trial that still exists, as a Tune checkpoint
    (`pipeline.search.tuner.CheckpointPruner` keeps only the latest few)."""
    import posixpath

    import pyarrow.fs
    from ray import tune

    fs, parent = checkpoint.filesystem, posixpath.dirname(checkpoint.path.rstrip("/"))
    found = fs.get_file_info(pyarrow.fs.FileSelector(parent, allow_not_found=True))
    names = sorted(i.path for i in found if i.type == pyarrow.fs.FileType.Directory
                   and posixpath.basename(i.path).startswith("checkpoint_"))
    return tune.Checkpoint(names[-1], filesystem=fs) if names else None


def _landed(config: dict[str, Any], in_actor: bool = False) -> tuple[SweepSpec, Distributed]:
    """The spec, as the sweep validated it, and this process's place in the run (a Train
    worker's, or alone in a Tune actor)."""
    spec: SweepSpec = config["spec"].open()
    torch.set_num_threads(max(1, int(spec.resources.cpus_per_worker)))
    if in_actor:
        return spec, _distributed(spec.resources, config.get("deepspeed_preset"), 1, 0, in_actor=True)
    context = ray.train.get_context()
    return spec, _distributed(spec.resources, config.get("deepspeed_preset"), context.get_world_size(),
                              context.get_world_rank())


def _distributed(resources: ResourcesConfig, preset: dict[str, Any] | None, world: int, rank: int,
                 in_actor: bool = False) -> Distributed:
    if resources.use_gpu:
        require_cuda_on_every_rank(world, rank)
        if in_actor:
            device = actor_gpu()
        else:
            from ray.train.torch import get_device

            device = get_device()
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    # Distributed applies the one rule of when DDP is plain training (engine.effective_strategy)
    return Distributed(
        strategy=resources.strategy, world_size=world, rank=rank, device=device,
        zero_stage=resources.deepspeed.zero_stage, deepspeed_preset=preset,
        node_id=ray.get_runtime_context().get_node_id(),  # which machine, for cluster debugging
    )


def actor_gpu() -> torch.device:
    """The first GPU Ray gave this actor, as torch numbers it: Ray makes the actor's GPUs its only
    visible ones (`CUDA_VISIBLE_DEVICES`), unless told not to, when torch sees every GPU (as
    `ray.train.torch.get_device` maps it)."""
    ids = [str(i) for i in ray.get_gpu_ids()]
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    if not ids:
        return torch.device("cuda", 0)
    return torch.device("cuda", visible.index(ids[0]) if ids[0] in visible else int(ids[0]))


def require_cuda_on_every_rank(world_size: int, rank: int) -> None:
    """With `use_gpu`, every rank must see CUDA (the sweep checked one GPU node; this one may
    differ). If one does not, every rank raises the same error, naming the ranks without it.

    Agreed by every rank before any collective of the trial: a rank that stopped alone left the
    others blocked in their first NCCL collective until its timeout (30 minutes, then Train retried
    the trial), and only rank 0 writes the trial's outcome, so a rank k != 0 left nothing recorded.
    (`tests/unit/search/test_worker.py`)"""
    mine = None
    if not torch.cuda.is_available():
        mine = f"rank {rank} ({ray.util.get_node_ip_address()}) sees no CUDA device with torch {torch.__version__}"
    missing = [problem for problem in _gathered("cuda", mine, world_size, rank) if problem]
    if missing:
        raise DrydockError(f"resources.use_gpu: the trial's workers were given GPUs, but {'; '.join(missing)}; "
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


def fetch_inputs(store: WorkStore, config: dict[str, Any], spec: SweepSpec) -> Prepared:
    """The tokenized data and its tokenizer, from this node's mirror (fetched once per node)."""
    folders = config["prepared"]
    for name in folders.values():
        if store.fetch(f"cache/{name}") is None:
            raise DrydockError(f"--workdir: {store.uri('cache/' + name)} is missing: the sweep prepared it there; "
                               "was the work location cleaned while the sweep ran?")
    return load_prepared(spec, store.path("cache"), folders)


def _teacher(store: WorkStore, ref: dict[str, Any]) -> TeacherResult:
    return TeacherResult(store.localize(ref["path"]), ref["metrics"], True, ref["key"])


def train_worker(config: dict[str, Any]) -> None:
    """Ray Train's `train_loop_per_worker` for a trial."""
    _train(config, ray.train.get_context().get_world_rank(), RayReporter(), in_actor=False)


def actor_worker(config: dict[str, Any]) -> None:
    """A one-worker trial in its Tune actor (`resources.trial_runner: tune-actor`): the same work
    as a Train worker's, rank 0 of 1 (`pipeline.search.driver._train_in_actor` retries what it
    raises). The actor may train the next trial (FIFO reuses it): what this one held on a GPU
    goes back to the device, as a Train worker's would with its process."""
    from ray import tune

    try:
        _train(config, 0, RayReporter(tune), in_actor=True)
    finally:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _train(config: dict[str, Any], rank: int, reporter: loop.Reporter, in_actor: bool) -> None:
    trial = as_trial(config["trial"])
    store = WorkStore.open(config["workdir"])
    trial_key = config["trial_dir"]
    output_dir = store.path(trial_key)
    try:
        spec, dist = _landed(config, in_actor)
        outcome = run_trial(
            spec, trial.method, trial.params, trial.seed, store.local, output_dir,
            prepared=fetch_inputs(store, config, spec), teacher=_teacher(store, config["teacher"]), dist=dist,
            reporter=reporter, log=lambda _: None,
            # a method's shared work lives in a node's folder, which the trial's other ranks (maybe
            # on other nodes) do not see when the work location is a URI: then only a one-worker
            # trial shares it (with the trials of its node), and a larger one builds its own
            share_work=not store.is_remote or dist.world_size == 1,
        )  # the export is verified by the sweep's recorder, in one long-lived fresh process
    except (loop.TrainingDiverged, DrydockError) as e:
        # Not retryable (it would diverge again; a setting or input is wrong): record it and end
        # the trial normally.
        if rank == 0:
            _record(store, trial_key, {"status": "failed", "error": str(e)})
        return
    except Exception as e:
        if rank == 0:
            _record(store, trial_key, {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        raise
    if rank == 0:
        # where the sweep (and a results table's reader) finds the student: the store's address
        _record(store, trial_key, {"status": "finished", **outcome.metrics, "student_path": store.uri(f"{trial_key}/student")})


def _record(store: WorkStore, trial_key: str, outcome: dict[str, Any]) -> None:
    """The outcome, written here and pushed with the trial's folder, the outcome last."""
    write_outcome(store.path(trial_key), outcome)
    store.push_last(trial_key, OUTCOME_FILE)


def teacher_worker(config: dict[str, Any]) -> None:
    """Ray Train's `train_loop_per_worker` for the teacher stage (`pipeline.search.teacher`): every
    rank fine-tunes together under the spec's strategy; rank 0 writes the teacher cache and pushes
    it to the work location. Every evaluation is reported with a checkpoint, so the driver can
    show progress and a retry resumes. A failure propagates, so Train retries it and the driver
    stops the sweep with the reason; a divergence is not retried (it would diverge again): rank 0
    writes it to `outcome_dir`, a key of the work location."""
    spec, dist = _landed(config)
    store = WorkStore.open(config["workdir"])
    key = config["teacher_key"]
    try:
        result = finetune_teacher(spec, fetch_inputs(store, config, spec), store.local, dist, RayReporter(), key=key)
    except TeacherDiverged as e:
        if dist.is_main:
            _record(store, config["outcome_dir"], {"status": "failed", "error": str(e)})
        return
    if result is not None:
        store.push(f"teachers/{key}")
