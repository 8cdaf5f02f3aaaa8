"""The training loop: one method, one trial, read top to bottom as the pseudocode in
`methods/base.py`:

    method.build() → for each phase: start_phase → param_groups → Engine (AdamW + LR schedule,
    wrapped plain | DDP | DeepSpeed) → steps (on_step, loss with gradient accumulation,
    backward, clip, step, after_optimizer_step) → periodic evaluation with the task's metrics,
    best-state tracking, checkpoint and report → restore the best selectable evaluation

It runs the same standalone (`drydock train`, the teacher stage) and inside a Ray Train worker
(the sweep): everything distributed comes in through `Distributed` and everything that leaves
(metrics, checkpoints) goes out through a `Reporter`, so the loop itself never imports Ray.
Devices, bf16 autocast, DDP or DeepSpeed, gradient accumulation and clipping are the loop's
business (`pipeline.training.engine`), never a method's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from methods.base import Method, Phase, Progress
from pipeline.config import TrainConfig
from pipeline.training.batches import BatchStream
from pipeline.training.engine import Distributed, Engine, check_groups, diverged_ranks
from pipeline.training.evaluation import evaluate
from pipeline.training.shared import SharedWorkCache
from pipeline.training.step_bar import StepDisplay, display_mode
from pipeline.training.steps import steps_per_epoch, total_steps
from pipeline.workdir import CHECKPOINT_FILE as CHECKPOINT_FILE
from pipeline.workdir import RNG_FILE, atomic_folder


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: the trial is recorded as failed with this reason."""


# ----------------------------------------------------------------------------------------------
# reports going out
# ----------------------------------------------------------------------------------------------


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
            with atomic_folder(self.checkpoint_dir, replace=True) as tmp:  # a crash mid-save keeps the last one
                save_checkpoint(tmp)

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
# the state a checkpoint carries
# ----------------------------------------------------------------------------------------------


@dataclass
class LoopState:
    """Where the run is and what it has seen: everything a checkpoint needs besides the method's
    and the engine's own state."""

    phase_index: int = 0
    step: int = 0  # optimizer steps done, over all phases
    best_state: dict[str, Any] | None = None
    best_metrics: dict[str, float] | None = None
    final_metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Resume:
    """A retried or restored trial's snapshot: the loop state, and where in its phase it was."""

    directory: Path
    snapshot: dict[str, Any]

    @property
    def phase_step(self) -> int:
        return int(self.snapshot["phase_step"])

    @property
    def mid_phase(self) -> bool:
        return self.phase_step > 0


class LossMeans:
    """Running means of the loss terms: one window per log row, one per evaluation report.

    Each evaluation's report carries every term's mean over the steps since the previous
    report (a term counts the steps it was computed in: MiniLM's distillation terms reach its
    first fine-tuning evaluation), so trackers see the losses while a trial runs."""

    def __init__(self) -> None:
        self.row: dict[str, float] = {}
        self.row_steps = 0
        self.since_eval: dict[str, list[float]] = {}

    def add(self, step_terms: Mapping[str, float]) -> None:
        for k, v in step_terms.items():
            self.row[k] = self.row.get(k, 0.0) + v
            total = self.since_eval.setdefault(k, [0.0, 0])
            total[0] += v
            total[1] += 1
        self.row_steps += 1

    def take_row(self) -> dict[str, float]:
        row = {f"loss/{k}": v / max(1, self.row_steps) for k, v in self.row.items()}
        self.row, self.row_steps = {}, 0
        return row

    def take_since_eval(self) -> dict[str, float]:
        means = {f"loss/{k}": total / count for k, (total, count) in self.since_eval.items()}
        self.since_eval = {}
        return means


# ----------------------------------------------------------------------------------------------
# the loop
# ----------------------------------------------------------------------------------------------


def seed_everything(seed: int, rank: int = 0) -> None:
    """Same seed → same trial; ranks differ so their dropout and Bernoulli draws differ."""
    s = seed * 1000 + rank
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)


def rng_state(dist: Distributed) -> dict[str, torch.Tensor]:
    """This rank's generators: the CPU's (Theseus's module draws, CoFi's hard-concrete noise on
    the CPU, dropout on the CPU) and, on a GPU, its device's (dropout there)."""
    state = {"cpu": torch.get_rng_state()}
    if dist.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(dist.device)
    return state


def restore_rng(directory: Path, dist: Distributed, snapshot: dict[str, Any]) -> None:
    """Each rank continues its own draws (ranks are seeded apart, `seed_everything`). A checkpoint
    from before per-rank files holds rank 0's CPU state only: every rank takes it, as then. A rank
    the checkpoint has no file for (the run resumed with more workers) keeps its seeded state."""
    path = directory / RNG_FILE.format(rank=dist.rank)
    if not path.is_file():
        if "rng" in snapshot:
            torch.set_rng_state(snapshot["rng"])
        return
    state = torch.load(path, weights_only=True, map_location="cpu")
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and dist.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], dist.device)


def run(
    method: Method,
    *,
    train_set,
    dev: Mapping[str, Any],
    task,
    train: TrainConfig,
    seed: int,
    dist: Distributed | None = None,
    reporter: Reporter | None = None,
    unlabeled_set=None,
    pad_id: int = 0,
    log_every: int = 50,
    shared_root: Path | None = None,
    shared_scope: str = "",
    progress_label: str = "train",
) -> LoopResult:
    """Train `method` and leave it holding its best selectable state (ready for export).
    `shared_root` and `shared_scope`: where work shared across trials is cached, and what those
    trials have in common (pipeline/training/shared.py); without a root nothing is shared.
    `progress_label`: what this run's progress is called where this process shows it
    (`pipeline.training.step_bar`)."""
    dist = dist or Distributed()
    training = TrainingRun(method, train=train, dev=dev, task=task, dist=dist, reporter=reporter or LocalReporter(),
                           pad_id=pad_id, log_every=log_every)
    seed_everything(seed, dist.rank)
    try:
        plan = training.build(train_set, unlabeled_set, seed, shared_root, shared_scope)
        training.resume(plan)
        started = time.perf_counter()
        with training.progress_bar(progress_label):
            for phase_index in range(training.state.phase_index, len(plan)):
                training.train_phase(plan, phase_index)
        return training.finish(time.perf_counter() - started)
    finally:
        if training.shared is not None:
            training.shared.close()


class TrainingRun:
    """The loop's state and its named steps; `run` above is the order they are called in."""

    def __init__(self, method: Method, *, train: TrainConfig, dev: Mapping[str, Any], task, dist: Distributed,
                 reporter: Reporter, pad_id: int, log_every: int):
        self.method, self.train, self.dev, self.task, self.dist = method, train, dev, task, dist
        self.reporter, self.pad_id, self.log_every = reporter, pad_id, log_every
        self.micro_batch = max(1, train.batch_size // (dist.world_size * train.grad_accumulation))
        self.state = LoopState()
        self.losses = LossMeans()
        self.streams: dict[str, BatchStream] = {}
        self.resuming: Resume | None = None
        self.best_is_current = False  # the latest evaluation is the best one (its state is best_state)
        self.display: StepDisplay | None = None
        self.shared: SharedWorkCache | None = None
        self.primary_key = f"eval/{task.primary_metric}"

    # -- build --------------------------------------------------------------------------------
    def build(self, train_set, unlabeled_set, seed: int, shared_root: Path | None, shared_scope: str) -> list[Phase]:
        """The context fields the contract says the loop fills, then build() and the plan."""
        method, train, dist = self.method, self.train, self.dist
        method.ctx.steps_per_epoch = steps_per_epoch(len(train_set), train.batch_size)
        if unlabeled_set is not None:
            method.ctx.unlabeled_steps_per_epoch = steps_per_epoch(len(unlabeled_set), train.batch_size)
        # the teacher is moved first: build() may copy its layers into the trainable module
        if method.ctx.teacher is not None:
            # transformers declares PreTrainedModel.to with functools.wraps(nn.Module.to): mypy sees the unbound signature
            method.ctx.teacher.to(dist.device).eval()  # type: ignore[arg-type]
        method.build()
        assert method.model is not None  # build() stores the module it returns
        method.model.to(dist.device)
        # before phases(): a method that loads another trial's work plans its producing phases with 0 steps
        self.shared = SharedWorkCache.open(method, shared_root, shared_scope, dist)
        plan = method.phases(total_steps(train, len(train_set)))
        grouped = train.group_by_length
        self.streams["train"] = BatchStream(train_set, self.micro_batch, seed, dist, self.pad_id, grouped)
        if unlabeled_set is not None:
            self.streams["unlabeled"] = BatchStream(unlabeled_set, self.micro_batch, seed + 1, dist, self.pad_id, grouped)
        self.eval_every = train.eval_every or method.ctx.steps_per_epoch
        self.planned = sum(p.steps for p in plan)
        # The schedulers' time axis (`progress`) counts steps on the labeled training data only:
        # MiniLM's distillation on unlabeled text can be several times its fine-tuning, and
        # counted in, its first evaluation would lie past the end of ASHA's time axis.
        self.labeled_before = [sum(p.steps for p in plan[:i] if p.data == "train") for i in range(len(plan))]
        self.labeled_total = max(1, sum(p.steps for p in plan if p.data == "train"))
        return plan

    # -- resume -------------------------------------------------------------------------------
    def resume(self, plan: list[Phase]) -> None:
        """A retried or restored trial continues from its snapshot. Phase transitions before it
        are replayed, since they may be surgery (CoFi prunes between phases). A snapshot taken
        at a phase boundary holds the state *before* the next start_phase; one taken mid-phase
        holds the state after it (loaded in `train_phase`, before the phase's groups are built,
        since it may change the module's shapes)."""
        directory = self.reporter.resume_from()
        if directory is None:
            return
        saved = torch.load(directory / CHECKPOINT_FILE, weights_only=True, map_location="cpu")
        self.state = LoopState(
            phase_index=saved["phase_index"], step=saved["step"], best_state=saved["best"],
            best_metrics=saved["best_metrics"], final_metrics=dict(saved["final_metrics"]), history=list(saved["history"]),
        )
        assert self.shared is not None  # opened by build()
        for phase in plan[: self.state.phase_index]:
            self.shared.before_phase(phase)
            self.method.start_phase(phase)
        for name, stream_state in saved["streams"].items():
            self.streams[name].restore(stream_state)
        self.resuming = Resume(directory, saved)
        if not self.resuming.mid_phase:
            self.method.load_state_dict(saved["method"])
        restore_rng(directory, self.dist, saved)

    # -- one phase ----------------------------------------------------------------------------
    def train_phase(self, plan: list[Phase], phase_index: int) -> None:
        method, phase = self.method, plan[phase_index]
        assert self.shared is not None  # opened by build()
        self.shared.before_phase(phase)  # publishes shared work once its producing phases are done
        method.start_phase(phase)
        if phase.steps == 0:  # e.g. MiniLM's distillation when another trial already did it
            return
        resuming, self.resuming = self.resuming, None
        if resuming is not None and resuming.mid_phase:
            method.load_state_dict(resuming.snapshot["method"])
        assert method.model is not None  # made by build()
        method.model.to(self.dist.device)
        groups = method.param_groups(phase)
        check_groups(groups, phase, method.model)
        engine = Engine(method, groups, phase, self.train, self.dist, self.micro_batch)
        first_step = 0
        if resuming is not None and resuming.mid_phase:
            engine.load(resuming.directory)
            first_step = resuming.phase_step
        if self.display is not None:
            self.display.phase(phase.name, self.state.step)
        try:
            for phase_step in range(first_step, phase.steps):
                progress = Progress(self.state.step, self.planned, phase.name, phase_step, phase.steps)
                schedule_values = method.on_step(progress)
                self.optimizer_step(engine, phase, progress)
                phase_done = phase_step + 1 == phase.steps
                if self.state.step % self.log_every == 0 or phase_done:
                    self.log_row(engine, schedule_values)
                if phase.evaluate and (self.state.step % self.eval_every == 0 or phase_done):
                    last = phase_done and phase_index + 1 == len(plan)
                    metrics = self.evaluate(engine, phase, phase_index, phase_step, last)
                    self.report(metrics, schedule_values, self.checkpoint(engine, phase_index, phase_step, phase_done))
        except BaseException:
            engine.close(restore=False)
            raise
        engine.close()  # one engine per phase: the next phase's must not run beside this one

    def optimizer_step(self, engine: Engine, phase: Phase, progress: Progress) -> None:
        """One optimizer step over `grad_accumulation` micro-batches; every rank stops together
        when any rank's loss is not finite."""
        accumulation = self.train.grad_accumulation
        step_terms: dict[str, float] = {}
        terms: dict[str, torch.Tensor] = {}
        for _ in range(accumulation):
            batch = {k: v.to(self.dist.device, non_blocking=True) for k, v in self.streams[phase.data].next().items()}
            terms = engine.micro_step(batch, progress, 1.0 / accumulation)
            for k, v in terms.items():
                step_terms[k] = step_terms.get(k, 0.0) + float(v.detach()) / accumulation
        self.losses.add(step_terms)
        diverged = diverged_ranks(step_terms["total"], self.dist)
        if diverged:
            where = f" on rank {', '.join(map(str, diverged))}" if self.dist.world_size > 1 else ""
            own = (": " + ", ".join(f"{k}={float(v.detach()):.4g}" for k, v in terms.items())) if self.dist.rank in diverged else ""
            raise TrainingDiverged(f"loss is not finite at step {self.state.step} (phase {phase.name}){where}{own}")
        engine.optimizer_step()
        self.method.after_optimizer_step(progress)
        self.state.step += 1
        if self.display is not None:
            self.display.advance(self.state.step)

    def log_row(self, engine: Engine, schedule_values: Mapping[str, float]) -> None:
        row = self.losses.take_row()
        row.update({f"schedule/{k}": float(v) for k, v in schedule_values.items()})
        row.update(engine.lrs())
        row["step"] = float(self.state.step)
        self.state.history.append(row)

    # -- evaluation, best state, checkpoint, report --------------------------------------------
    def evaluate(self, engine: Engine, phase: Phase, phase_index: int, phase_step: int, last: bool) -> dict[str, float]:
        """The task metrics on the dev set; the best selectable evaluation's state is kept, at
        full precision (what is exported is its float32 weights, whatever trained in bf16)."""
        metrics = evaluate(self.method.eval_model(), self.dev, self.task, self.train.eval_batch_size, self.dist.device, self.pad_id)
        metrics["step"] = float(self.state.step)
        if not last:
            # The last evaluation carries no epoch or progress, the schedulers' time axis: a
            # scheduler must not stop a trial that has finished training and is exporting.
            labeled = self.labeled_before[phase_index] + (phase_step + 1 if phase.data == "train" else 0)
            metrics["epoch"] = labeled / self.method.ctx.steps_per_epoch
            metrics["progress"] = labeled / self.labeled_total
        best = self.state.best_metrics
        self.best_is_current = phase.select and (best is None or metrics[self.primary_key] > best[self.primary_key])
        if self.best_is_current:
            with engine.full_precision():
                self.state.best_state, self.state.best_metrics = self.method.state_dict(), dict(metrics)
        self.state.final_metrics = dict(metrics)
        return metrics

    def checkpoint(self, engine: Engine, phase_index: int, phase_step: int, phase_done: bool) -> Callable[[Path], None]:
        """What `save(directory)` writes: the engine's state mid-phase (a finished phase's
        optimizer is not needed again) and, on rank 0, the loop's snapshot."""
        state = self.state
        if self.best_is_current:  # the state evaluate() just kept: one copy in memory and on disk
            method_state = state.best_state  # (torch.save writes tensors shared by two entries once)
        else:
            with engine.full_precision():
                method_state = self.method.state_dict()
        snapshot = {
            "phase_index": phase_index + 1 if phase_done else phase_index,
            "phase_step": 0 if phase_done else phase_step + 1,
            "step": state.step,
            "method": method_state,
            "streams": {k: s.state() for k, s in self.streams.items()},
            "best": state.best_state,
            "best_metrics": state.best_metrics,
            "final_metrics": state.final_metrics,
            "history": list(state.history),
        }
        is_main, rng, rank = self.dist.is_main, rng_state(self.dist), self.dist.rank

        def save(directory: Path) -> None:
            if not phase_done:
                engine.save(directory)
            torch.save(rng, directory / RNG_FILE.format(rank=rank))  # every rank: its draws are its own
            if is_main:
                torch.save(snapshot, directory / CHECKPOINT_FILE)

        return save

    def report(self, metrics: dict[str, float], schedule_values: Mapping[str, float], save: Callable[[Path], None]) -> None:
        report = {**metrics, **{f"schedule/{k}": float(v) for k, v in schedule_values.items()}, **self.losses.take_since_eval()}
        report["total_steps"] = float(self.planned)  # with `step`: how far the run is, for whoever shows its progress
        if self.display is not None:
            self.display.evaluated(self.primary_key, metrics[self.primary_key])
        self.reporter.report(report, save)

    # -- the end ------------------------------------------------------------------------------
    @contextmanager
    def progress_bar(self, label: str) -> Iterator[None]:
        """Rank 0's steps shown while it trains (`train.progress_bar`): a bar with the latest
        metric on a terminal, a heartbeat line in a log, nothing where progress is not shown
        (a Ray Train worker, `drydock -q`): `pipeline.training.step_bar.display_mode`."""
        if self.train.progress_bar and self.dist.is_main and display_mode() != "off":
            self.display = StepDisplay(label, self.planned)
        try:
            yield
        finally:
            if self.display is not None:
                self.display.close()
                self.display = None

    def finish(self, train_seconds: float) -> LoopResult:
        state = self.state
        if state.best_state is not None:
            self.method.load_state_dict(state.best_state)
        return LoopResult(
            best_metrics=state.best_metrics or state.final_metrics,
            final_metrics=state.final_metrics,
            steps=state.step,
            train_seconds=train_seconds,
            history=state.history,
        )
