"""The training loop: one method, one trial, read top to bottom.

    method.build() → for each phase: start_phase → param_groups → AdamW + LR schedule →
    wrap (plain | DDP | DeepSpeed) → steps (on_step, loss, backward, clip, step) → periodic
    evaluation with the task's metrics, best-state tracking, checkpoint and report → restore the
    best selectable evaluation → method.export()

It runs the same standalone (`drydock train`, the teacher stage) and inside a Ray Train worker
(the sweep): everything distributed comes in through `Distributed` and everything that leaves
(metrics, checkpoints) goes out through a `Reporter`, so the loop itself never imports Ray.
Devices, bf16 autocast, DDP or DeepSpeed, gradient accumulation and clipping are the loop's
business, never a method's.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler

from methods.base import Method, ParamGroup, Phase, Progress, logits_of
from pipeline.config import TrainConfig
from pipeline.prepare.metrics import compute_metrics

CHECKPOINT_FILE = "trainer_state.pt"


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: the trial is recorded as failed with this reason."""


# ----------------------------------------------------------------------------------------------
# settings coming in, reports going out
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Distributed:
    """Where and how this process trains; the default is one process on the CPU."""

    strategy: Literal["none", "ddp", "deepspeed"] = "none"
    world_size: int = 1
    rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    zero_stage: int = 1
    deepspeed_preset: Mapping[str, Any] | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def diverged_ranks(loss: float, dist: Distributed) -> list[int]:
    """The ranks whose loss this step is not finite, agreed by every rank.

    Why a collective: a loss can overflow on one rank's batch only (bf16, an odd batch). If that
    rank stopped alone, the others would block in their next gradient all-reduce until the
    backend's timeout (30 minutes for gloo) and the run would end as a crash, not a divergence.
    One all-reduce of `world_size` flags per step makes every rank stop at the same step."""
    bad = not math.isfinite(loss)
    if dist.world_size == 1 or not torch.distributed.is_initialized():
        return [dist.rank] if bad else []
    flags = torch.zeros(dist.world_size, device=dist.device)
    flags[dist.rank] = float(bad)
    torch.distributed.all_reduce(flags)
    return [rank for rank, flag in enumerate(flags.tolist()) if flag]


class Reporter(Protocol):
    def report(self, metrics: dict[str, float], save_checkpoint: Callable[[Path], None] | None) -> None: ...

    def resume_from(self) -> Path | None: ...


class LocalReporter:
    """Standalone runs: keeps every report; the latest checkpoint lives in `checkpoint_dir`."""

    def __init__(self, checkpoint_dir: Path | None = None, echo: Callable[[dict[str, float]], None] | None = None):
        self.history: list[dict[str, float]] = []
        self.checkpoint_dir = checkpoint_dir
        self.echo = echo

    def report(self, metrics: dict[str, float], save_checkpoint: Callable[[Path], None] | None) -> None:
        self.history.append(dict(metrics))
        if self.echo:
            self.echo(metrics)
        if save_checkpoint is not None and self.checkpoint_dir is not None:
            tmp = self.checkpoint_dir.with_name(self.checkpoint_dir.name + ".tmp")
            tmp.mkdir(parents=True, exist_ok=True)
            save_checkpoint(tmp)
            if self.checkpoint_dir.exists():
                import shutil

                shutil.rmtree(self.checkpoint_dir)
            tmp.rename(self.checkpoint_dir)

    def resume_from(self) -> Path | None:
        d = self.checkpoint_dir
        return d if d is not None and (d / CHECKPOINT_FILE).is_file() else None


@dataclass
class LoopResult:
    best_metrics: dict[str, float]  # the evaluation whose state was exported
    final_metrics: dict[str, float]  # the last evaluation
    steps: int
    train_seconds: float
    history: list[dict[str, float]]


# ----------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------


def collate(features: list[dict[str, Any]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Dynamic padding to the longest sequence of the batch: short GLUE sentences pay for
    their own length, not for max_seq_length."""
    length = max(len(f["input_ids"]) for f in features)
    n = len(features)
    input_ids = torch.full((n, length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, length), dtype=torch.long)
    token_type_ids = torch.zeros((n, length), dtype=torch.long)
    for i, f in enumerate(features):
        k = len(f["input_ids"])
        input_ids[i, :k] = torch.as_tensor(f["input_ids"])
        attention_mask[i, :k] = 1
        if "token_type_ids" in f and f["token_type_ids"] is not None:
            token_type_ids[i, :k] = torch.as_tensor(f["token_type_ids"])
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    if "labels" in features[0]:
        labels = [f["labels"] for f in features]
        dtype = torch.float32 if isinstance(labels[0], float) else torch.long
        batch["labels"] = torch.tensor(labels, dtype=dtype)
    return batch


class EpochSampler(Sampler[int]):
    """Seeded shuffling per epoch, sharded by rank, resumable mid-epoch.

    Every rank draws the same permutation (seed + epoch) and takes its stride of it, which is
    what DistributedSampler does; unlike it, `skip` lets a resumed trial continue at the batch it
    stopped at instead of replaying the epoch from its start.
    """

    def __init__(self, size: int, seed: int, rank: int = 0, world_size: int = 1):
        self.size, self.seed, self.rank, self.world_size = size, seed, rank, world_size
        self.epoch, self.skip = 0, 0

    def indices(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.size, generator=g).tolist()
        per_rank = math.ceil(self.size / self.world_size)
        order += order[: per_rank * self.world_size - self.size]  # pad so every rank gets as many
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices()[self.skip :])

    def __len__(self) -> int:
        return math.ceil(self.size / self.world_size) - self.skip


class BatchStream:
    """An endless stream of micro-batches over epochs; knows where it is for checkpoints."""

    def __init__(self, dataset, micro_batch: int, seed: int, dist: Distributed, pad_id: int):
        self.sampler = EpochSampler(len(dataset), seed, dist.rank, dist.world_size)
        self.loader = DataLoader(
            dataset, batch_size=micro_batch, sampler=self.sampler, collate_fn=lambda f: collate(f, pad_id), drop_last=False,
            generator=torch.Generator(),  # its own: a new iterator must not draw from the global RNG
        )
        self.micro_batch = micro_batch
        self.consumed = 0  # micro-batches taken in the current epoch
        self._it: Iterator | None = None

    def next(self) -> dict[str, torch.Tensor]:
        if self._it is None:
            self._it = iter(self.loader)
        try:
            batch = next(self._it)
        except StopIteration:
            self.sampler.epoch += 1
            self.sampler.skip = 0
            self.consumed = 0
            self._it = iter(self.loader)
            batch = next(self._it)
        self.consumed += 1
        return batch

    def state(self) -> dict[str, int]:
        return {"epoch": self.sampler.epoch, "consumed": self.consumed}

    def restore(self, state: Mapping[str, int]) -> None:
        self.sampler.epoch = int(state["epoch"])
        self.sampler.skip = int(state["consumed"]) * self.micro_batch
        self.consumed = int(state["consumed"])
        self._it = None


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    return max(1, math.ceil(num_examples / batch_size))


def total_steps(train: TrainConfig, num_examples: int) -> int:
    steps = max(1, math.ceil(train.epochs * steps_per_epoch(num_examples, train.batch_size)))
    return min(steps, train.max_steps) if train.max_steps else steps


# ----------------------------------------------------------------------------------------------
# optimisation
# ----------------------------------------------------------------------------------------------


def lr_factor(step: int, steps: int, warmup_steps: int, schedule: str) -> float:
    """Linear warm-up, then linear decay to 0 at `steps` (or constant after warm-up)."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    return max(0.0, (steps - step) / max(1, steps - warmup_steps))


def build_optimizer(groups: list[ParamGroup], phase: Phase, warmup_ratio: float):
    torch_groups = [
        {"params": g.params, "lr": g.lr, "weight_decay": g.weight_decay, "maximize": g.maximize, "name": g.name}
        for g in groups
        if g.params
    ]
    optimizer = torch.optim.AdamW(torch_groups, lr=torch_groups[0]["lr"] if torch_groups else 1e-3)
    warmup = int(round(phase.steps * (phase.warmup_ratio if phase.warmup_ratio is not None else warmup_ratio)))
    lambdas = [
        (lambda s, sch=g.schedule: lr_factor(s, phase.steps, warmup, sch)) for g in groups if g.params
    ]
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
    return optimizer, scheduler


def _check_groups(groups: list[ParamGroup], phase: Phase, model: nn.Module) -> None:
    for g in groups:
        owner = g.name.split(".", 1)[0]
        if g.name not in phase.trainable and owner not in phase.trainable:
            raise ValueError(f"phase {phase.name!r}: group {g.name!r} is not in its trainable groups {phase.trainable}")
    trained = {id(p) for g in groups for p in g.params}
    for p in model.parameters():
        p.requires_grad_(id(p) in trained)


class TrainStep(nn.Module):
    """What DDP or DeepSpeed wraps: the method's trainable module, with `forward` = `method.loss`.

    Wrapping this (not the bare model) keeps the gradient all-reduce hooks of DDP and the
    parameter partitioning of DeepSpeed in force while the method computes its own losses.
    """

    def __init__(self, method: Method):
        super().__init__()
        self.model = method.model
        self._method = [method]  # a list, so nn.Module does not register it

    def forward(self, batch: dict[str, torch.Tensor], progress: Progress) -> dict[str, torch.Tensor]:
        return self._method[0].loss(batch, progress)


def skip_cpu_shm_build() -> None:
    """Keep DeepSpeed on the CPU from compiling its shared-memory all-reduce.

    DeepSpeed's communication backend JIT-compiles that C++ op when it starts on the CPU
    accelerator: 32 s measured here the first time in each environment, and a C++ compiler
    needed for it. Only `inference_all_reduce` uses it; training's collectives all go
    through torch.distributed (gloo here). Marked incompatible, the op is not built and nothing
    else changes. Where a later DeepSpeed renames the op, this does nothing.
    """
    import deepspeed.ops

    compatible = deepspeed.ops.__compatible_ops__
    if "deepspeed_shm_comm" in compatible:
        compatible["deepspeed_shm_comm"] = False


class Engine:
    """One optimizer step's mechanics for plain, DDP and DeepSpeed training."""

    def __init__(self, method: Method, groups: list[ParamGroup], phase: Phase, train: TrainConfig, dist: Distributed, micro_batch: int):
        self.dist, self.train = dist, train
        step_module = TrainStep(method)
        self.optimizer, self.scheduler = build_optimizer(groups, phase, train.warmup_ratio)
        self.deepspeed = None
        if dist.strategy == "deepspeed":
            import deepspeed

            if dist.device.type == "cpu":
                skip_cpu_shm_build()
            config = deepspeed_config(train, dist, micro_batch)
            self.deepspeed, self.optimizer, _, self.scheduler = deepspeed.initialize(
                model=step_module, optimizer=self.optimizer, lr_scheduler=self.scheduler, config=config
            )
            self.module = self.deepspeed
        elif dist.strategy == "ddp" and dist.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [dist.device.index] if dist.device.type == "cuda" else None
            # find_unused_parameters: Theseus skips modules per batch, CoFi drops whole sub-layers
            self.module = DistributedDataParallel(step_module, device_ids=device_ids, find_unused_parameters=True)
        else:
            self.module = step_module
        self.trainable = [p for g in groups for p in g.params]
        self.autocast = _autocast(train, dist)

    def micro_step(self, batch: dict[str, torch.Tensor], progress: Progress, scale: float) -> dict[str, torch.Tensor]:
        with self.autocast():
            terms = self.module(batch, progress)
        loss = sum(v for k, v in terms.items() if not k.startswith("_"))
        if self.deepspeed is not None:
            self.deepspeed.backward(loss)  # DeepSpeed scales by its accumulation steps itself
        else:
            (loss * scale).backward()
        terms = dict(terms)
        terms["total"] = loss
        return terms

    def optimizer_step(self) -> float:
        if self.deepspeed is not None:
            self.deepspeed.step()
            norm = self.deepspeed.get_global_grad_norm()
            return float(norm) if norm is not None else float("nan")
        norm = float("nan")
        if self.train.max_grad_norm > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, self.train.max_grad_norm))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def lrs(self) -> dict[str, float]:
        return {f"lr/{g.get('name', i)}": g["lr"] for i, g in enumerate(self.optimizer.param_groups)}

    def save(self, directory: Path) -> None:
        """Optimizer and LR-schedule state. DeepSpeed's save is a collective: every rank calls
        this with its own directory, and Ray merges the ranks' folders into one checkpoint."""
        if self.deepspeed is not None:
            self.deepspeed.save_checkpoint(str(directory / "deepspeed"), tag="state")
        elif self.dist.is_main:
            torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}, directory / "engine.pt")

    def load(self, directory: Path) -> None:
        if self.deepspeed is not None:
            self.deepspeed.load_checkpoint(str(directory / "deepspeed"), tag="state", load_module_strict=False)
            return
        state = torch.load(directory / "engine.pt", weights_only=True, map_location="cpu")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def deepspeed_config(train: TrainConfig, dist: Distributed, micro_batch: int) -> dict[str, Any]:
    config: dict[str, Any] = dict(dist.deepspeed_preset or {})
    config.update(
        {
            "train_micro_batch_size_per_gpu": micro_batch,
            "gradient_accumulation_steps": train.grad_accumulation,
            "train_batch_size": micro_batch * train.grad_accumulation * dist.world_size,
            "gradient_clipping": train.max_grad_norm,
            "zero_optimization": {**config.get("zero_optimization", {}), "stage": dist.zero_stage},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
    )
    if _use_bf16(train, dist):
        config["bf16"] = {"enabled": True}
    return config


def _use_bf16(train: TrainConfig, dist: Distributed) -> bool:
    if train.bf16 == "off" or dist.device.type != "cuda":
        return False
    return train.bf16 == "on" or torch.cuda.is_bf16_supported()


def _autocast(train: TrainConfig, dist: Distributed):
    if _use_bf16(train, dist) and dist.strategy != "deepspeed":  # DeepSpeed casts itself
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    import contextlib

    return contextlib.nullcontext


# ----------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def predict(model: nn.Module, dataset, batch_size: int, device: torch.device, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels over a dataset, in order (evaluation is not sharded: dev sets are small
    and every rank computing the same numbers keeps ranks in lock-step without a gather)."""
    was_training = model.training
    model.eval()
    logits, labels = [], []
    for start in range(0, len(dataset), batch_size):
        columns = dataset[start : start + batch_size]  # one Arrow slice, not row by row
        batch = collate([dict(zip(columns, values)) for values in zip(*columns.values())], pad_id)
        inputs = {k: v.to(device) for k, v in batch.items() if k != "labels"}
        logits.append(logits_of(model(**inputs)).float().cpu())
        if "labels" in batch:
            labels.append(batch["labels"])
    model.train(was_training)
    return torch.cat(logits).numpy(), (torch.cat(labels).numpy() if labels else np.array([]))


def evaluate(model: nn.Module, dev: Mapping[str, Any], task, batch_size: int, device: torch.device, pad_id: int = 0) -> dict[str, float]:
    """Task metrics on every dev split: `eval/<metric>` for "dev", `eval_<split>/<metric>` else."""
    out: dict[str, float] = {}
    for split, dataset in dev.items():
        logits, labels = predict(model, dataset, batch_size, device, pad_id)
        prefix = "eval" if split == "dev" else f"eval_{split.removeprefix('dev_')}"
        for name, value in compute_metrics(task.metrics, logits, labels, task.regression).items():
            out[f"{prefix}/{name}"] = float(value)
    return out


# ----------------------------------------------------------------------------------------------
# the loop
# ----------------------------------------------------------------------------------------------


def seed_everything(seed: int, rank: int = 0) -> None:
    """Same seed → same trial; ranks differ so their dropout and Bernoulli draws differ."""
    s = seed * 1000 + rank
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)


def _to(batch: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="train", unit="step", dynamic_ncols=True, leave=False)


def run(
    method: Method,
    *,
    train_set,
    dev: Mapping[str, Any],
    task,
    train: TrainConfig,
    seed: int,
    dist: Distributed = Distributed(),
    reporter: Reporter | None = None,
    unlabeled_set=None,
    pad_id: int = 0,
    log_every: int = 50,
) -> LoopResult:
    """Train `method` and leave it holding its best selectable state (ready for export)."""
    reporter = reporter or LocalReporter()
    seed_everything(seed, dist.rank)
    device = dist.device
    micro_batch = max(1, train.batch_size // (dist.world_size * train.grad_accumulation))
    steps = total_steps(train, len(train_set))
    method.ctx.steps_per_epoch = steps_per_epoch(len(train_set), train.batch_size)
    if unlabeled_set is not None:
        method.ctx.unlabeled_steps_per_epoch = steps_per_epoch(len(unlabeled_set), train.batch_size)

    # the teacher is moved first: build() may copy its layers into the trainable module
    if method.ctx.teacher is not None:
        method.ctx.teacher.to(device).eval()
    method.build()
    method.model.to(device)
    plan = method.phases(steps)
    planned = sum(p.steps for p in plan)
    streams = {"train": BatchStream(train_set, micro_batch, seed, dist, pad_id)}
    if unlabeled_set is not None:
        streams["unlabeled"] = BatchStream(unlabeled_set, micro_batch, seed + 1, dist, pad_id)
    eval_every = train.eval_every or method.ctx.steps_per_epoch

    step = 0
    best_state: dict[str, Any] | None = None
    best_metrics: dict[str, float] | None = None
    final_metrics: dict[str, float] = {}
    history: list[dict[str, float]] = []
    primary_key = f"eval/{task.primary_metric}"

    # Resume (a retried or restored trial): the snapshot says where we were. Phase transitions
    # before it are replayed, since they may be surgery (CoFi prunes between phases). A snapshot
    # taken at a phase boundary holds the state *before* the next start_phase; one taken
    # mid-phase holds the state after it.
    resume_dir = reporter.resume_from()
    saved = torch.load(resume_dir / CHECKPOINT_FILE, weights_only=True, map_location="cpu") if resume_dir else None
    start_phase = 0
    if saved is not None:
        start_phase, step = saved["phase_index"], saved["step"]
        best_state, best_metrics = saved["best"], saved["best_metrics"]
        final_metrics, history = dict(saved["final_metrics"]), list(saved["history"])
        for p in plan[:start_phase]:
            method.start_phase(p)
        for name, s in saved["streams"].items():
            streams[name].restore(s)
        if saved["phase_step"] == 0:
            method.load_state_dict(saved["method"])
        torch.set_rng_state(saved["rng"])

    # The schedulers' time axis counts steps on the labeled training data only: MiniLM's
    # distillation on unlabeled text can be several times its fine-tuning, and counted in, its
    # first evaluation would already lie past ASHA's max_t, where ASHA stops a trial.
    labeled_before = [sum(p.steps for p in plan[:i] if p.data == "train") for i in range(len(plan))]
    labeled_total = max(1, sum(p.steps for p in plan if p.data == "train"))

    # Each evaluation's report carries every loss term's mean over the steps since the previous
    # report (a term counts the steps it was computed in: MiniLM's distillation terms reach its
    # first fine-tuning evaluation), so trackers see the losses while a trial runs.
    since_eval: dict[str, list[float]] = {}

    t0 = time.perf_counter()
    bar = _progress_bar(planned, train.progress_bar and dist.is_main and sys.stderr.isatty())
    for phase_index in range(start_phase, len(plan)):
        phase = plan[phase_index]
        method.start_phase(phase)
        if phase.steps == 0:  # e.g. MiniLM's distillation when another trial already did it
            continue
        resuming_mid_phase = saved is not None and saved["phase_step"] > 0
        if resuming_mid_phase:  # before param_groups: the state may change the module's shapes
            method.load_state_dict(saved["method"])
        method.model.to(device)
        groups = method.param_groups(phase)
        _check_groups(groups, phase, method.model)
        engine = Engine(method, groups, phase, train, dist, micro_batch)
        stream = streams[phase.data]
        first_step = 0
        if resuming_mid_phase:
            engine.load(resume_dir)
            first_step = saved["phase_step"]
        saved = None
        if bar is not None:
            bar.n = step
            bar.set_description(phase.name)
        running: dict[str, float] = {}
        running_steps = 0
        for phase_step in range(first_step, phase.steps):
            progress = Progress(step, planned, phase.name, phase_step, phase.steps)
            schedule_values = method.on_step(progress)
            step_terms: dict[str, float] = {}
            for _ in range(train.grad_accumulation):
                terms = engine.micro_step(_to(stream.next(), device), progress, 1.0 / train.grad_accumulation)
                for k, v in terms.items():
                    step_terms[k] = step_terms.get(k, 0.0) + float(v.detach()) / train.grad_accumulation
            for k, v in step_terms.items():
                running[k] = running.get(k, 0.0) + v
                since_eval.setdefault(k, [0.0, 0])
                since_eval[k][0] += v
                since_eval[k][1] += 1
            diverged = diverged_ranks(step_terms["total"], dist)
            if diverged:
                where = f" on rank {', '.join(map(str, diverged))}" if dist.world_size > 1 else ""
                own = (": " + ", ".join(f"{k}={float(v.detach()):.4g}" for k, v in terms.items())) if dist.rank in diverged else ""
                raise TrainingDiverged(f"loss is not finite at step {step} (phase {phase.name}){where}{own}")
            engine.optimizer_step()
            step += 1
            running_steps += 1
            phase_done = phase_step + 1 == phase.steps
            if bar is not None:
                bar.update(1)
            if step % log_every == 0 or phase_done:
                row = {f"loss/{k}": v / running_steps for k, v in running.items()}
                row.update({f"schedule/{k}": float(v) for k, v in schedule_values.items()})
                row.update(engine.lrs())
                row["step"] = float(step)
                history.append(row)
                running, running_steps = {}, 0
            if not (phase.evaluate and (step % eval_every == 0 or phase_done)):
                continue
            metrics = evaluate(method.eval_model(), dev, task, train.eval_batch_size, device, pad_id)
            metrics["step"] = float(step)
            if not (phase_done and phase_index + 1 == len(plan)):
                # The last evaluation carries no epoch or progress, the schedulers' time axis: a
                # scheduler must not stop a trial that has finished training and is exporting.
                labeled = labeled_before[phase_index] + (phase_step + 1 if phase.data == "train" else 0)
                metrics["epoch"] = labeled / method.ctx.steps_per_epoch
                metrics["progress"] = labeled / labeled_total
            if phase.select and (best_metrics is None or metrics[primary_key] > best_metrics[primary_key]):
                best_state, best_metrics = method.state_dict(), dict(metrics)
            final_metrics = dict(metrics)
            snapshot = {
                "phase_index": phase_index + 1 if phase_done else phase_index,
                "phase_step": 0 if phase_done else phase_step + 1,
                "step": step,
                "method": method.state_dict(),
                "streams": {k: s.state() for k, s in streams.items()},
                "best": best_state,
                "best_metrics": best_metrics,
                "final_metrics": final_metrics,
                "history": history,
                "rng": torch.get_rng_state(),  # dropout and Bernoulli draws continue exactly
            }

            def save(directory: Path, snapshot=snapshot, engine=engine, phase_done=phase_done) -> None:
                if not phase_done:
                    engine.save(directory)
                if dist.is_main:
                    torch.save(snapshot, directory / CHECKPOINT_FILE)

            report = {**metrics, **{f"schedule/{k}": float(v) for k, v in schedule_values.items()},
                      **{f"loss/{k}": total / count for k, (total, count) in since_eval.items()}}
            since_eval = {}
            reporter.report(report, save)
    if bar is not None:
        bar.close()
    if best_state is not None:
        method.load_state_dict(best_state)
    return LoopResult(
        best_metrics=best_metrics or final_metrics,
        final_metrics=final_metrics,
        steps=step,
        train_seconds=time.perf_counter() - t0,
        history=history,
    )
