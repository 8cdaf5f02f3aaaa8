"""One optimizer step's mechanics for plain, DDP and DeepSpeed training: the optimizer and its
learning-rate schedule, the wrapped module, bf16 autocast, gradient accumulation and clipping,
the divergence check every rank agrees on, and the engine's part of a checkpoint.

Methods never see any of this (`methods/base.py`): the loop builds one `Engine` per phase from
the phase's parameter groups and calls `micro_step` / `optimizer_step`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from methods.base import LOGGED_ONLY_PREFIX, Method, ParamGroup, Phase, Progress, check_loss_terms, group_owner
from pipeline.config import TrainConfig


def effective_strategy(strategy: str, world_size: int) -> Literal["none", "ddp", "deepspeed"]:
    """DDP with one worker is plain training (nothing to all-reduce, no wrapper to pay for);
    DeepSpeed stays DeepSpeed even alone, since its config (ZeRO, bf16) changes the training."""
    if strategy == "deepspeed":
        return "deepspeed"
    return "ddp" if strategy == "ddp" and world_size > 1 else "none"


@dataclass(frozen=True)
class Distributed:
    """Where and how this process trains; the default is one process on the CPU."""

    strategy: Literal["none", "ddp", "deepspeed"] = "none"
    world_size: int = 1
    rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    zero_stage: int = 1
    deepspeed_preset: Mapping[str, Any] | None = None
    node_id: str | None = None  # the cluster node this process runs on, recorded with the trial

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", effective_strategy(self.strategy, self.world_size))

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


def lr_factor(step: int, steps: int, warmup_steps: int, schedule: str) -> float:
    """Linear warm-up, then linear decay to 0 at `steps` (or constant after warm-up)."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    return max(0.0, (steps - step) / max(1, steps - warmup_steps))


def build_optimizer(groups: list[ParamGroup], phase: Phase, warmup_ratio: float):
    torch_groups: list[dict[str, Any]] = [
        {"params": g.params, "lr": g.lr, "weight_decay": g.weight_decay, "maximize": g.maximize, "name": g.name}
        for g in groups
        if g.params
    ]
    optimizer = torch.optim.AdamW(torch_groups, lr=torch_groups[0]["lr"] if torch_groups else 1e-3)
    warmup = int(round(phase.steps * (phase.warmup_ratio if phase.warmup_ratio is not None else warmup_ratio)))

    def factor(schedule: Literal["linear", "constant"]) -> Callable[[int], float]:
        return lambda s: lr_factor(s, phase.steps, warmup, schedule)

    lambdas = [factor(g.schedule) for g in groups if g.params]
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
    return optimizer, scheduler


def check_groups(groups: list[ParamGroup], phase: Phase, model: nn.Module) -> None:
    for g in groups:
        if g.name not in phase.trainable and group_owner(g.name) not in phase.trainable:
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

    def forward(self, batch: dict[str, torch.Tensor], progress: Progress) -> Mapping[str, torch.Tensor]:
        method = self._method[0]
        return check_loss_terms(method.loss(batch, progress), method.name)


def skip_cpu_shm_build() -> None:
    """Keep DeepSpeed on the CPU from compiling its shared-memory all-reduce.

    DeepSpeed's communication backend JIT-compiles that C++ op when it starts on the CPU
    accelerator: tens of seconds the first time in each environment, and a C++ compiler needed
    for it (docs/stack-facts.md). Only `inference_all_reduce` uses it; training's collectives all go
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
        model = method.model
        assert model is not None  # the loop calls method.build() first
        self.dist, self.train = dist, train
        self.step_module = step_module = TrainStep(method)
        self.optimizer, self.scheduler = build_optimizer(groups, phase, train.warmup_ratio)
        self.deepspeed = None
        self.trainable = [p for g in groups for p in g.params]
        self._full_precision_frozen: list[tuple[nn.Parameter, torch.Tensor]] = []
        self._plain_attributes: list[tuple[nn.Parameter | nn.Module, set[str]]] = []
        self.partitioned = dist.strategy == "deepspeed" and dist.zero_stage == 3
        if dist.strategy == "deepspeed":
            import deepspeed

            if dist.device.type == "cpu":
                skip_cpu_shm_build()
            config = deepspeed_config(train, dist, micro_batch)
            if config["bf16"]["enabled"] or self.partitioned:
                # DeepSpeed keeps fp32 masters of the trained parameters only; under bf16 it casts
                # the whole module, under ZeRO-3 it partitions it. The frozen parameters (a Theseus
                # hybrid's teacher layers) are kept here, so that what is exported and
                # checkpointed is whole and full precision.
                trained = {id(p) for p in self.trainable}
                # (on the CPU: on a GPU they would take the memory ZeRO-3 is there to save)
                self._full_precision_frozen = [(p, p.detach().to("cpu", copy=True)) for p in model.parameters()
                                               if id(p) not in trained]
            if self.partitioned:
                # ZeRO-3 turns each parameter into a partitioned one by setting attributes on it
                # (ds_id, ds_tensor, all_gather, ...), and each module by setting others (hooks'
                # autograd functions whose closures hold the engine): what was there before is
                # what `close` keeps
                self._plain_attributes = [(p, set(p.__dict__)) for p in model.parameters()]
                self._plain_attributes += [(m, set(m.__dict__)) for m in model.modules()]
            self.deepspeed, self.optimizer, _, self.scheduler = deepspeed.initialize(
                args=deepspeed_device_args(dist.device), model=step_module, optimizer=self.optimizer,
                lr_scheduler=self.scheduler, config=config,
            )
            self.module = self.deepspeed
            self._unfused = _unfused_masters(self.deepspeed.optimizer)
        elif dist.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [dist.device.index] if dist.device.type == "cuda" else None
            # find_unused_parameters: Theseus skips modules per batch, CoFi drops whole sub-layers
            self.module = DistributedDataParallel(step_module, device_ids=device_ids, find_unused_parameters=True)
        else:
            self.module = step_module
        self.model = model
        self.autocast = _autocast(train, dist)
        self.bounded = [(g.params, g.bounds) for g in groups if g.bounds is not None and g.params]

    @property
    def low_precision(self) -> bool:
        """DeepSpeed holds the module in bf16 and the trained weights' fp32 masters itself."""
        return self.deepspeed is not None and self.deepspeed.bfloat16_enabled()

    @property
    def holds_weights(self) -> bool:
        """The module's parameters are not the weights to keep: bf16 copies of DeepSpeed's fp32
        masters, or (ZeRO-3) this rank's slice of each, empty outside a forward."""
        return self.low_precision or (self.deepspeed is not None and self.partitioned)

    def _full_precision_values(self) -> list[tuple[nn.Parameter, torch.Tensor]]:
        """Every parameter of the module with its fp32 value, on the CPU: the optimizer's master for
        the trained ones (assembled across ranks: a collective, so every rank calls this at the
        same point), the copy kept at start for the frozen ones."""
        from deepspeed.utils import safe_get_full_fp32_param

        masters = []
        for p in self.trainable:
            value = safe_get_full_fp32_param(p)
            value = value if value is not None else self._unfused.get(id(p))
            if value is None:
                raise RuntimeError(f"DeepSpeed's {type(getattr(self.deepspeed, 'optimizer', None)).__name__} holds no float32 master of a "
                                   "trained parameter")
            # to the CPU at once: the whole student at fp32 beside the GPU's slices would defeat ZeRO-3
            masters.append((p, value.detach().to("cpu", dtype=torch.float32, copy=True)))
        return masters + self._full_precision_frozen

    @contextlib.contextmanager
    def full_precision(self) -> Iterator[None]:
        """The module's parameters at full precision, on the CPU, while the block runs (a state to
        keep: the best evaluation's, a checkpoint's; no forward runs in it), then back to what
        trains."""
        if not self.holds_weights:
            yield
            return
        values = self._full_precision_values()
        training = [(p, p.data) for p, _ in values]
        for p, value in values:
            p.data = value
        try:
            yield
        finally:
            for p, data in training:
                p.data = data

    def micro_step(self, batch: dict[str, torch.Tensor], progress: Progress, scale: float) -> dict[str, torch.Tensor]:
        with self.autocast():
            terms = self.module(batch, progress)
        loss = sum(v for k, v in terms.items() if not k.startswith(LOGGED_ONLY_PREFIX))
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
            ds_norm = self.deepspeed.get_global_grad_norm()
            norm = float(ds_norm) if ds_norm is not None else float("nan")
        else:
            norm = float("nan")
            if self.train.max_grad_norm > 0:
                norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, self.train.max_grad_norm))
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self._apply_bounds()
        return norm

    @torch.no_grad()
    def _apply_bounds(self) -> None:
        """Clamp each bounded group into its range: every copy the next step reads, the module's
        parameter (bf16 under DeepSpeed bf16, this rank's slice under ZeRO-3) and the optimizer's
        fp32 master (this rank's fragment under ZeRO 1-3). Clamping only the parameter is undone at
        the next step, when DeepSpeed copies the unclamped master back into it. Elementwise, so
        each rank clamps what it holds: no collective."""
        for params, (low, high) in self.bounded:
            for p in params:
                p.data.clamp_(low, high)  # empty under ZeRO-3 outside a forward
                if self.deepspeed is None:
                    continue
                if hasattr(p, "ds_tensor"):  # ZeRO-3: this rank's slice and its fp32 master
                    from deepspeed.utils import safe_get_local_fp32_param, safe_set_local_fp32_param

                    p.ds_tensor.data.clamp_(low, high)
                    master = safe_get_local_fp32_param(p)
                    if master is not None:  # a copy where the optimizer is offloaded: set it back
                        safe_set_local_fp32_param(p, master.clamp(low, high))
                elif (mapping := getattr(p, "_hp_mapping", None)) is not None:  # ZeRO 1-2: this rank's fragment
                    mapping.get_hp_fragment().data.clamp_(low, high)
                elif id(p) in self._unfused:  # ZeRO 0 under bf16
                    self._unfused[id(p)].data.clamp_(low, high)

    def lrs(self) -> dict[str, float]:
        return {f"lr/{g.get('name', i)}": g["lr"] for i, g in enumerate(self.optimizer.param_groups)}

    def save(self, directory: Path) -> None:
        """Optimizer and LR-schedule state. DeepSpeed's save is a collective: every rank calls
        this with its own directory, and Ray merges the ranks' folders into one checkpoint."""
        if self.deepspeed is not None:
            # The loop's snapshot holds the module's weights at full precision; DeepSpeed would
            # write a second copy (in bf16 under bf16) beside its optimizer shards, and under
            # ZeRO 2-3 a third of the frozen parameters. It writes an empty module instead, and
            # `load` restores the optimizer's masters and moments only: the module comes from
            # the snapshot (tests/integration/training/test_deepspeed_equivalence.py resumes so).
            engine = self.deepspeed
            engine.module_state_dict = lambda *args, **kwargs: {}
            try:
                engine.save_checkpoint(str(directory / "deepspeed"), tag="state", exclude_frozen_parameters=True)
            finally:
                del engine.module_state_dict
        elif self.dist.is_main:
            torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}, directory / "engine.pt")

    def load(self, directory: Path) -> None:
        if self.deepspeed is not None:
            self.deepspeed.load_checkpoint(str(directory / "deepspeed"), tag="state", load_module_strict=False)
            return
        state = torch.load(directory / "engine.pt", weights_only=True, map_location="cpu")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def close(self, restore: bool = True) -> None:
        """Release what the engine hung on the parameters. A DeepSpeed engine registers gradient
        hooks and keeps its optimizer's partitions of the same parameters the next phase trains:
        left alive, the next phase's engine would run beside it. `restore=False` (a phase that
        raised) skips putting the full-precision weights back: that assembles them across ranks,
        a collective the other ranks may never join."""
        if self.deepspeed is not None:
            # the module leaves the phase as it came: whole, in float32, plain parameters
            values = self._full_precision_values() if restore and self.holds_weights else []
            bf16 = self.low_precision
            self.deepspeed.destroy()
            self.deepspeed = None
            for p, value in values:
                p.data = value.to(self.dist.device)
            if bf16 and restore:
                self.model.float()
            if self.partitioned:
                # ZeRO-3 pushes the wrapped module onto a module-level stack it never pops: left
                # there, it keeps the engine (its forward hooks' closures) and the optimizer's
                # partitions alive for the rest of the process, one per phase
                from deepspeed.runtime.zero import parameter_offload

                stack = parameter_offload.FWD_MODULE_STACK
                stack[:] = [m for m in stack if m is not self.step_module]
            for obj, plain in self._plain_attributes:
                # a parameter that still looks partitioned would be taken as such by the next
                # phase's ZeRO-3 engine (it converts only parameters without ds_id) and every
                # other reader would see an empty tensor
                for name in set(obj.__dict__) - plain:
                    delattr(obj, name)


def _unfused_masters(optimizer) -> dict[int, torch.Tensor]:
    """ZeRO 0 under bf16 wraps the optimizer in an unfused one that keeps its masters in
    fp32_groups, beside fp16_groups, and maps no parameter (safe_get_full_fp32_param: None); the
    other DeepSpeed optimizers have neither list."""
    return {id(low): high for lows, highs in zip(getattr(optimizer, "fp16_groups", []), getattr(optimizer, "fp32_groups", []))
            for low, high in zip(lows, highs)}


def deepspeed_device_args(device: torch.device) -> Any:
    """What tells DeepSpeed the device this rank trains on. Unasked, DeepSpeed moves the module to
    `cuda:LOCAL_RANK` (deepspeed/runtime/engine.py, `_set_distributed_vars`), while Ray Train hands a
    worker the first of its own GPUs among those its node shows every worker: a worker that owns
    GPUs {2, 3} as local rank 1 gets `cuda:2` from Ray, where drydock puts the batches and the
    teacher, and DeepSpeed would put the student on `cuda:1`. DeepSpeed takes `args.device_rank`
    before LOCAL_RANK. None on the CPU, where there is one device."""
    if device.type != "cuda":
        return None
    from types import SimpleNamespace

    return SimpleNamespace(device_rank=device.index if device.index is not None else torch.cuda.current_device())


def deepspeed_config(train: TrainConfig, dist: Distributed, micro_batch: int) -> dict[str, Any]:
    config: dict[str, Any] = dict(dist.deepspeed_preset or {})
    config.update(
        {
            "train_micro_batch_size_per_gpu": micro_batch,
            "gradient_accumulation_steps": train.grad_accumulation,
            # The loop calls backward once per micro-batch and step() once per optimizer step.
            # DeepSpeed's default (managed) accumulation counts micro-steps inside step() instead,
            # so with k > 1 it would update once every k of our steps, with k times the gradient
            # and the LR schedule k times too slow. Unmanaged, step() is the boundary; backward
            # still divides each micro-batch's loss by k (tests/integration/training/
            # test_deepspeed_equivalence.py holds DeepSpeed to DDP's steps, rates and weights).
            "managed_gradient_accumulation": False,
            "train_batch_size": micro_batch * train.grad_accumulation * dist.world_size,
            "gradient_clipping": train.max_grad_norm,
            "zero_optimization": {**config.get("zero_optimization", {}), "stage": dist.zero_stage},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
    )
    # train.bf16 decides, whatever a preset says: one switch, and the loop knows its state
    config["bf16"] = {**config.get("bf16", {}), "enabled": _use_bf16(train, dist)}
    if config["bf16"]["enabled"] and dist.zero_stage >= 1 and "data_types" not in config:
        # DDP under autocast accumulates gradients in the fp32 parameters' dtype; DeepSpeed keeps
        # bf16 ones unless told: stage 1's BF16 optimizer and stages 2-3's gradient partitions then
        # accumulate in fp32. Stage 0 refuses the mix (docs/stack-facts.md, "bf16-accumulation").
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    return config


def native_bf16(capability: tuple[int, int]) -> bool:
    """bf16 in hardware: compute capability 8.0 (Ampere) and later. `torch.cuda.is_bf16_supported()`
    also says yes on V100 and T4 (7.x), which emulate it, slower than fp32: `bf16: auto` must not
    pick it there."""
    return capability >= (8, 0)


def _use_bf16(train: TrainConfig, dist: Distributed) -> bool:
    """`on`: bf16 on any device (DeepSpeed's CPU accelerator and CPU autocast have it too); `auto`:
    on a GPU with bf16 in hardware; `off`: never."""
    if train.bf16 != "auto":
        return train.bf16 == "on"
    return dist.device.type == "cuda" and native_bf16(torch.cuda.get_device_capability(dist.device))


def _autocast(train: TrainConfig, dist: Distributed):
    if _use_bf16(train, dist) and dist.strategy != "deepspeed":  # DeepSpeed casts itself
        return lambda: torch.autocast(dist.device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext
