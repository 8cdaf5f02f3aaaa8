"""The method contract: what a compression method provides and when the loop calls it.

A method is research code (plain PyTorch + transformers, never ray/mlflow/deepspeed); the
training loop (`pipeline/loop.py`) is engineering code that owns devices, precision, DDP or
DeepSpeed, optimizers, LR schedules, evaluation, checkpoints and export verification. The two
meet only at the hooks below, called at fixed points:

    method = MethodClass(params, ctx)             # ctx: task, fine-tuned frozen teacher, defaults
    request = method.unlabeled()                  # optional: unlabeled text for a distillation phase
    model = method.build()                        # the trainable nn.Module  ── hook: build
    plan = method.phases(total_steps)             # e.g. replacing → successor fine-tuning
    for phase in plan:                            # ── hook: phases
        method.start_phase(phase)                 # surgery between phases (CoFi prunes here)
        groups = method.param_groups(phase)       # lr, weight decay, maximize  ── hook: param_groups
        optimizer = AdamW(groups); scheduler = warm-up + linear decay (or constant) per group
        wrapped = DDP(TrainStep(method)) | deepspeed.initialize(TrainStep(method))
        for each step of the phase (batches from phase.data, with gradient accumulation):
            values = method.on_step(progress)     # schedules → logged as schedule/<name>
            losses = wrapped(batch, progress)     # calls method.loss  ── hook: loss
            backward(sum(losses.values())); clip; optimizer.step(); scheduler.step()
            every eval_every steps and at the phase end, when phase.evaluate:
                metrics = evaluate(method.eval_model())          ── hook: eval_model
                keep method.state_dict() of the best phase.select evaluation
    method.load_state_dict(best)                  # ── hook: state_dict / load_state_dict
    student = method.export()                     # physically smaller PreTrainedModel ── hook: export
    save_pretrained + tokenizer + drydock.json; reload in a fresh process; compare logits

Rules a method follows:
- Everything with parameters that `loss` uses for gradients lives inside the module `build`
  returns, so DDP and DeepSpeed see it; the fine-tuned teacher in `ctx.teacher` is frozen, already
  on the training device, and may be used directly for targets.
- `loss` returns named scalar terms; the loop sums them and logs each as `loss/<name>`.
  A term that is only logged, not optimised, must be detached and named with a `_` prefix.
- Randomness (Theseus' Bernoulli draws, CoFi's hard-concrete noise) comes from torch's global
  generator, which the loop seeds per trial and per rank.
- Schedules are pure functions of progress (`methods/_schedules.py`); `on_step` only evaluates
  them and stores the values the next `loss` call uses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn
from transformers import PreTrainedModel


class MethodParams(BaseModel):
    """Base of every method's parameter model: frozen, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class TaskInfo:
    name: str
    num_labels: int  # 1 for regression
    regression: bool
    label_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class StudentDefaults:
    """The spec's `student:` section; a method's own parameters override it."""

    num_layers: int | None = None
    layers: tuple[int, ...] | None = None
    hidden_size: int | None = None
    num_heads: int | None = None
    intermediate_size: int | None = None


@dataclass
class MethodContext:
    task: TaskInfo
    teacher: PreTrainedModel | None  # fine-tuned on the task, frozen, eval mode, on the device
    load_pretrained: Callable[[], PreTrainedModel]  # the teacher checkpoint before fine-tuning
    student: StudentDefaults = field(default_factory=StudentDefaults)
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    steps_per_epoch: int = 1  # optimizer steps per epoch of the labeled training set
    unlabeled_steps_per_epoch: int = 0  # the same for the unlabeled set, when one was requested
    seed: int = 0
    # Where a method may keep work shared by the trials of a sweep (MiniLM's distilled student),
    # and what those trials have in common (the teacher's cache key: task, teacher, data and its
    # settings). None outside a workdir: nothing is shared.
    cache_dir: Path | None = None
    cache_scope: str = ""


@dataclass(frozen=True)
class UnlabeledRequest:
    """Text without labels for a distillation phase (MiniLM): training texts, more files."""

    max_samples: int | None = None  # of the task's training split, before max_train_samples
    files: tuple[str, ...] = ()  # extra text files, one text per line


@dataclass(frozen=True)
class Phase:
    name: str
    steps: int
    # names of the ParamGroups trained in this phase; a group named "<name>.<suffix>" (e.g. the
    # ".no_decay" half from decay_groups) belongs to "<name>". Every other parameter is frozen.
    trainable: tuple[str, ...]
    data: Literal["train", "unlabeled"] = "train"
    evaluate: bool = True  # dev evaluation is meaningful during this phase
    select: bool = True  # its evaluations may be chosen as the best checkpoint
    warmup_ratio: float | None = None  # None: the spec's train.warmup_ratio


@dataclass
class ParamGroup:
    name: str
    params: list[nn.Parameter]
    lr: float
    weight_decay: float = 0.0
    maximize: bool = False  # gradient ascent (CoFi's Lagrange multipliers); never a negative lr
    schedule: Literal["linear", "constant"] = "linear"  # warm-up + linear decay, or constant


@dataclass(frozen=True)
class Progress:
    step: int  # optimizer steps completed before this one, over all phases
    total_steps: int
    phase: str
    phase_step: int  # optimizer steps completed in this phase
    phase_steps: int

    @property
    def fraction(self) -> float:
        return self.step / max(1, self.total_steps)

    @property
    def phase_fraction(self) -> float:
        return self.phase_step / max(1, self.phase_steps)


Batch = Mapping[str, torch.Tensor]  # input_ids, attention_mask, token_type_ids[, labels]


class Method(ABC):
    """One compression method. Subclasses set `name`, `Params` and implement the hooks."""

    name: ClassVar[str]
    Params: ClassVar[type[MethodParams]] = MethodParams
    # whether build() needs ctx.teacher (the fine-tuned teacher); see needs_teacher()
    uses_teacher: ClassVar[bool] = True
    # one-line description for `drydock methods`
    summary: ClassVar[str] = ""

    def __init__(self, params: MethodParams | Mapping[str, Any], ctx: MethodContext):
        self.params = params if isinstance(params, self.Params) else self.Params.model_validate(dict(params))
        self.ctx = ctx
        self.model: nn.Module | None = None

    # -- planning --------------------------------------------------------------------------
    @classmethod
    def needs_teacher(cls, params: MethodParams) -> bool:
        """Whether this configuration needs the fine-tuned teacher (the pipeline fetches one)."""
        return cls.uses_teacher

    def unlabeled(self) -> UnlabeledRequest | None:
        """Unlabeled text this configuration needs; None for most methods."""
        return None

    # -- hooks -----------------------------------------------------------------------------
    @abstractmethod
    def build(self) -> nn.Module:
        """Create and return the trainable module; also store it as `self.model`."""

    @abstractmethod
    def phases(self, total_steps: int) -> list[Phase]:
        """The training plan; steps should add up to total_steps unless the method says why."""

    def start_phase(self, phase: Phase) -> None:  # noqa: B027 - an optional hook: most methods need none
        """Called before each phase's optimizer is built (surgery, freezing, switching losses)."""

    @abstractmethod
    def param_groups(self, phase: Phase) -> list[ParamGroup]:
        """The parameter groups trained in `phase` (their names match `phase.trainable`).

        The loop sets requires_grad=False on every model parameter outside these groups."""

    def on_step(self, progress: Progress) -> dict[str, float]:
        """Evaluate schedules for the coming step; the values are logged as schedule/<name>."""
        return {}

    def after_optimizer_step(self, progress: Progress) -> None:  # noqa: B027 - optional hook
        """Called after every optimizer step: the one hook that may change parameters."""

    @abstractmethod
    def loss(self, batch: Batch, progress: Progress) -> dict[str, torch.Tensor]:
        """Named loss terms for one micro-batch."""

    @abstractmethod
    def eval_model(self) -> nn.Module:
        """The module scored on the dev set: called as m(input_ids=, attention_mask=,
        token_type_ids=) and returning an object with `.logits` (or the logits tensor)."""

    @abstractmethod
    def export(self) -> PreTrainedModel:
        """A physically smaller, standalone model whose logits equal eval_model()'s."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume mid-trial or to restore the best evaluation."""
        assert self.model is not None
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        assert self.model is not None
        self.model.load_state_dict(state["model"])


# ----------------------------------------------------------------------------------------------
# helpers shared by methods
# ----------------------------------------------------------------------------------------------

_NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "LayerNorm.bias")


def decay_groups(
    name: str,
    named_params: Iterable[tuple[str, nn.Parameter]],
    lr: float,
    weight_decay: float,
    schedule: Literal["linear", "constant"] = "linear",
) -> list[ParamGroup]:
    """Two groups, `<name>` with weight decay and `<name>.no_decay` (biases, LayerNorm) without:
    the BERT fine-tuning convention, so every method trains comparable parameters alike."""
    decay, no_decay = [], []
    for pname, p in named_params:
        (no_decay if any(pname.endswith(n) for n in _NO_DECAY) else decay).append(p)
    groups = [ParamGroup(name, decay, lr, weight_decay, schedule=schedule)]
    if no_decay:
        groups.append(ParamGroup(f"{name}.no_decay", no_decay, lr, 0.0, schedule=schedule))
    return groups


def group_owner(name: str) -> str:
    """The phase-trainable name a parameter group belongs to: `student.no_decay` → `student`."""
    return name.split(".", 1)[0]


def freeze(module: nn.Module) -> nn.Module:
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def logits_of(output: Any) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.logits
