"""The method contract: what a compression method provides and when the loop calls it.

A method is research code (plain PyTorch + transformers, never ray/mlflow/deepspeed, never a
lock, a process or a collective); the training loop (`pipeline/training/loop.py`) is
engineering code that owns devices, precision, DDP or DeepSpeed, optimizers, LR schedules,
evaluation, checkpoints and export verification. The two meet only at the hooks below, called
at fixed points, and everything the loop relies on is written in this file:

    method = MethodClass(params, ctx)             # ctx: task, fine-tuned frozen teacher, defaults
    request = method.unlabeled()                  # optional: unlabeled text for a distillation phase
    ctx.steps_per_epoch = …; ctx.unlabeled_steps_per_epoch = …   # filled by the loop
    model = method.build()                        # the trainable nn.Module  ── hook: build
    work = method.shared_work()                   # optional: work shared by trials ── hook: shared_work
    if another trial already did it:              #   the pipeline keys, locks and broadcasts
        method.load_shared(folder)                #   ── hook: load_shared (phases() then plans
                                                  #      work.produced_by with 0 steps)
    plan = method.phases(total_steps)             # e.g. replacing → successor fine-tuning
    for phase in plan:                            # ── hook: phases
        if this trial did the shared work and its producing phases are over:
            method.save_shared(tmp); publish tmp as folder          ── hook: save_shared
        method.start_phase(phase)                 # surgery between phases (CoFi prunes here)
        groups = method.param_groups(phase)       # lr, weight decay, maximize  ── hook: param_groups
        check every group's group_owner(name) is in phase.trainable; freeze every other parameter
        optimizer = AdamW(groups); scheduler = warm-up + linear decay (or constant) per group
        wrapped = DDP(TrainStep(method)) | deepspeed.initialize(TrainStep(method))
        for each step of the phase (batches from phase.data, with gradient accumulation):
            values = method.on_step(progress)     # schedules → logged as schedule/<name>
            losses = check_loss_terms(wrapped(batch, progress))  # method.loss  ── hook: loss
            backward(sum of the terms without a "_" prefix) → logged as loss/total
            clip; optimizer.step(); scheduler.step(); clamp each group with bounds into them
            method.after_optimizer_step(progress) # ── hook: after_optimizer_step
            every eval_every steps and at the phase end, when phase.evaluate:
                metrics = evaluate(method.eval_model())          ── hook: eval_model
                keep method.state_dict() of the best phase.select evaluation
    method.load_state_dict(best)                  # ── hook: state_dict / load_state_dict
    student = method.export()                     # physically smaller PreTrainedModel ── hook: export
    save_pretrained + tokenizer + drydock.json; reload in a fresh process; compare logits

What the pipeline reads of a method before any trial runs is its declaration
(`methods/declaration.py`, importable without torch, which `Method` subclasses): `name`, `Params`
(the spec's parameters are validated by it, once, where they land), `summary`,
`same_modules_on_every_rank`, `uses_unlabeled_text`, `needs_teacher(params)` (fetch a fine-tuned teacher or not) and
`learning_rate_override(params)` (the learning rate the method's parameters set for the trial; it
becomes `ctx.learning_rate`). Nothing else of a method's parameters is read outside the method.

Rules a method follows:
- Everything with parameters that `loss` uses for gradients lives inside the module `build`
  returns, so DDP and DeepSpeed see it; the fine-tuned teacher in `ctx.teacher` is frozen, already
  on the training device, and may be used directly for targets.
- `loss` returns named scalar terms; the loop sums them and logs each as `loss/<name>`.
  A term that is only logged, not optimised, must be detached and named with a `_` prefix
  (`LOGGED_ONLY_PREFIX`). The names in `RESERVED_LOSS_KEYS` belong to the loop (`total` is the
  sum it writes); `check_loss_terms` refuses them rather than let the loop overwrite a term.
- A parameter group is named after the phase-trainable name it belongs to, optionally with a
  `.<suffix>` (`decay_groups` makes `<name>` and `<name>.no_decay`): `group_owner`.
- Randomness (Theseus' Bernoulli draws, CoFi's hard-concrete noise) comes from torch's global
  generator, which the loop seeds per trial and per rank.
- Schedules are pure functions of progress (`methods/_schedules.py`); `on_step` only evaluates
  them and stores the values the next `loss` call uses: it never changes a parameter (it runs
  before the step's forward, on every rank, outside the optimizer). A range a parameter must
  stay in is its group's `bounds` (CoFi's log α), applied by the loop after each optimizer
  step; other changes outside the gradient step go in `after_optimizer_step`.
- A method whose forward runs other modules on each rank (Theseus draws its own modules per
  rank, CoFi's hard-concrete draws can switch a whole sub-layer off on one rank) sets
  `same_modules_on_every_rank = False`: DeepSpeed ZeRO-3 gathers each module's parameters with
  a collective as the module runs, so ranks running different modules wait for each other
  forever (reproduced with CoFi on two gloo ranks); the spec refuses ZeRO-3 for such a method.
- Work worth doing once for many trials (MiniLM's distilled student) is declared, not
  coordinated: `shared_work` names what the artifact depends on and which phases produce it,
  `save_shared`/`load_shared` write and read it in a folder they are handed. The pipeline
  (`pipeline/training/shared.py`) owns the folder, the lock, the waiting and the broadcast.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from torch import nn
from transformers import PreTrainedModel

from methods.declaration import MethodDeclaration, MethodParams


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
    """What a method knows of the trial. The pipeline fills the first group when it creates the
    method; the loop fills the second before `build()`, since only it knows the data's size and
    batch size (a method may size its phases from them in `phases`, and MiniLM keys its shared
    distillation on them)."""

    task: TaskInfo
    teacher: PreTrainedModel | None  # fine-tuned on the task, frozen, eval mode, on the device
    load_pretrained: Callable[[], PreTrainedModel]  # the teacher checkpoint before fine-tuning
    student: StudentDefaults = field(default_factory=StudentDefaults)
    learning_rate: float = 5e-5  # Method.learning_rate_override(params), else train.learning_rate
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    # filled by the loop before build():
    steps_per_epoch: int = 1  # optimizer steps per epoch of the labeled training set
    unlabeled_steps_per_epoch: int = 0  # the same for the unlabeled set, when one was requested


@dataclass(frozen=True)
class UnlabeledRequest:
    """Text without labels for a distillation phase (MiniLM): training texts, more files."""

    max_samples: int | None = None  # of the task's training split, before max_train_samples
    files: tuple[str, ...] = ()  # extra text files, one text per line


@dataclass(frozen=True)
class SharedWork:
    """An artifact a method builds once and other trials reuse (MiniLM's distilled student).

    The method says only what the artifact depends on and which of its phases produce it; the
    pipeline derives the artifact's folder from `key` (plus what every trial of the workdir
    shares: the teacher's cache key), lets one trial build it while the others wait, and has the
    rest load it instead of running the producing phases."""

    key: Mapping[str, Any]  # JSON-able: everything the artifact depends on, nothing it does not
    produced_by: tuple[str, ...]  # names of the phases that produce it


@dataclass(frozen=True)
class Phase:
    name: str
    steps: int
    # names of the ParamGroups trained in this phase; a group belongs to group_owner(its name)
    # (e.g. the ".no_decay" half from decay_groups). Every other parameter is frozen.
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
    # (low, high): the loop clamps the group's parameters into it after every optimizer step,
    # and also the optimizer's own full-precision copies (DeepSpeed's masters), which a method
    # clamping the module's parameters in place would miss (CoFi's log α range)
    bounds: tuple[float, float] | None = None


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

# Loss names the loop writes itself: "total" is the sum of the optimised terms.
RESERVED_LOSS_KEYS = frozenset({"total"})
# A loss term named with this prefix is logged but not optimised (it must be detached).
LOGGED_ONLY_PREFIX = "_"
# "<owner>.<suffix>": a parameter group's name up to the first separator is its owner.
GROUP_SEPARATOR = "."


def check_loss_terms(terms: Mapping[str, torch.Tensor], method: str = "the method") -> Mapping[str, torch.Tensor]:
    """`terms`, unless it uses a name the loop writes itself: the loop would overwrite that term
    in its logs without a word, so the loop calls this on every `loss()` result."""
    clash = sorted(RESERVED_LOSS_KEYS.intersection(terms))
    if clash:
        raise ValueError(
            f"{method}.loss returned the reserved loss term(s) {clash}: the loop writes "
            f"{sorted(RESERVED_LOSS_KEYS)} itself; give the term another name"
        )
    return terms


def group_owner(group_name: str) -> str:
    """The phase-trainable name a ParamGroup belongs to: `student.no_decay` → `student`. A phase
    lists owners in `trainable`, so a method may split an owner's parameters into as many groups
    as it needs (decay and no decay, different rates) without the phase naming each."""
    return group_name.split(GROUP_SEPARATOR, 1)[0]


class Method(MethodDeclaration, ABC):
    """One compression method. Subclasses declare it (`MethodDeclaration`: `name`, `Params`, the
    facts the pipeline reads before a trial) and implement the hooks."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A Method that asks for unlabeled text says so to the plan, which reads the declaration:
        overriding `unlabeled` declares `uses_unlabeled_text` unless the class sets it itself."""
        super().__init_subclass__(**kwargs)
        if "unlabeled" in cls.__dict__ and "uses_unlabeled_text" not in cls.__dict__:
            cls.uses_unlabeled_text = True

    def __init__(self, params: MethodParams | Mapping[str, Any], ctx: MethodContext):
        self.params = params if isinstance(params, self.Params) else self.Params.model_validate(dict(params))
        self.ctx = ctx
        self.model: nn.Module | None = None

    def unlabeled(self) -> UnlabeledRequest | None:
        """Unlabeled text this configuration needs; None for most methods. A method that overrides
        this declares `uses_unlabeled_text` (the contract tests hold every method to it)."""
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
        """Evaluate schedules for the coming step; the values are logged as schedule/<name>.

        It must not change parameters: it runs before the forward pass, outside the optimizer,
        and nothing else about the step is done yet (see after_optimizer_step)."""
        return {}

    def after_optimizer_step(self, progress: Progress) -> None:  # noqa: B027 - optional hook
        """Change parameters after the optimizer stepped (`progress` is the step just taken).
        Every rank calls it, so it must be deterministic. Under plain training and DDP,
        evaluations and checkpoints see its result. Under DeepSpeed they may not: the optimizer
        keeps its own fp32 copy of each trained parameter (and under bf16 or ZeRO-3 the loop keeps
        one of each frozen parameter, and ZeRO-3 leaves `p.data` empty here), which only the loop
        reaches. A range is therefore said as the group's `bounds`."""

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

    # -- work shared across trials ----------------------------------------------------------
    def shared_work(self) -> SharedWork | None:
        """What this configuration can share with other trials, or None (most methods). Called
        after build(), with the loop's context fields filled, before phases()."""
        return None

    def save_shared(self, folder: Path) -> None:
        """Write the shared artifact into `folder` (an empty folder the pipeline hands over and
        publishes afterwards), once the phases in `shared_work().produced_by` have run."""
        raise NotImplementedError(f"{self.name} declares shared work but cannot save it")

    def load_shared(self, folder: Path) -> None:
        """Load the artifact another trial saved into `folder`. Called before phases(), which
        then keeps the producing phases in the plan with 0 steps (a resumed trial finds its
        phases where its checkpoint says they were)."""
        raise NotImplementedError(f"{self.name} declares shared work but cannot load it")

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
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for pname, p in named_params:
        (no_decay if any(pname.endswith(n) for n in _NO_DECAY) else decay).append(p)
    groups = [ParamGroup(name, decay, lr, weight_decay, schedule=schedule)]
    if no_decay:
        groups.append(ParamGroup(f"{name}{GROUP_SEPARATOR}no_decay", no_decay, lr, 0.0, schedule=schedule))
    return groups


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def freeze(module: ModuleT) -> ModuleT:
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def logits_of(output: Any) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.logits
