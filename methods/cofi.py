"""CoFi structured pruning (Xia et al. 2022, arXiv 2204.00408; princeton-nlp/CoFiPruning).

- Student: a copy of the fine-tuned teacher under hard-concrete masks (`methods/_l0.py`) at five
  granularities: per layer an MHA mask and an FFN mask, per head a head mask, per FFN
  intermediate dimension a mask, and one hidden-dimension mask shared by the embeddings' output
  and every layer (`methods/_surgery.py` places them in the forward). A learned linear map,
  initialised to the identity, carries student hidden states into the teacher's space for layer
  distillation.
- Phases (lengths are fractions of the trial's optimizer steps, so any `train.epochs` works):
  1. `distill_warmup` (`distill_warmup_fraction`): distillation of the unmasked copy; no masks,
     no sparsity pressure.
  2. `prune` (`pruning_fraction`): masks sampled per micro-batch, the Lagrangian term added; the
     target sparsity ramps linearly from 0 to `target_sparsity` over the first
     `sparsity_warmup_fraction` of the phase, then holds while training goes on. Evaluated with
     deterministic masks but never selected as the best checkpoint: a denser model from early in
     the ramp would win on accuracy.
  3. `finetune` (the remaining steps): `start_phase` binarises the masks (deterministic rule)
     and prunes the model physically; the smaller model is fine-tuned, distillation still on by
     default (`finetune_distill`). Only its evaluations are selectable.
- Losses: task_weight·CE (optional, 0 by default like the official code) +
  distill_pred_weight·T²·KL(teacher ‖ student) at T = `distill_temperature` +
  distill_layer_weight·Σ_t MSE(W·h_student[m(t)], h_teacher[t]), plus in `prune`
  λ1·(ŝ − t) + λ2·(ŝ − t)² with ŝ the expected sparsity. The teacher layers t are every
  `distill_layer_stride`-th layer counted down from the top (2, 5, 8, 11 of 12; 2, 5 of 6).
  m(t) is the surviving student layer with the lowest MSE (dynamic matching); with the order
  constraint the teacher layers are matched from the top down and each takes the best layer
  strictly below the match of the teacher layer above it (the official "version 4"), so a
  later teacher layer never maps below an earlier one's match.
- Optimisation (all groups AdamW, built by the loop): model and layer-map parameters at the
  learning rate (embeddings frozen by default, as in the official scripts); log α in their own
  group at `reg_learning_rate`; λ1, λ2 in a `maximize=True` group at the same rate (gradient
  ascent, never a negative learning rate). Mask and multiplier groups keep a constant rate.
- Schedules: target sparsity (pure function of the pruning step, `methods/_l0.py`); model
  learning rate constant in `distill_warmup`, linear decay over `prune` (the official code
  restarts its linear schedule when pruning starts), constant in `finetune` (the official
  fine-tuning runs use no scheduler); no LR warm-up in any phase (the official scripts use none),
  so the spec's `train.warmup_ratio` does not apply to CoFi.
- Export: a `PrunedBertForSequenceClassification` (`methods/_pruned_bert.py`): pruned heads leave
  smaller Q/K/V/output matrices, removed sub-layers and empty layers are gone, pruned hidden and
  intermediate dimensions shrink every Linear and LayerNorm. Its config and model classes ship in
  the saved folder (`auto_map`; load with `trust_remote_code=True`). Its logits equal the masked
  model's under deterministic masks, and its parameter count equals the count from the masks.

Where drydock differs from the paper / official code, and why:
- Phase lengths are fractions of the trial instead of epochs (and instead of the official
  trainer's hard-coded 100 warm-up steps), so a sweep's `train.epochs` scales all phases; the
  official recipe (small GLUE sets: 100 pruning epochs with a 20-epoch ramp, then 20 fine-tuning
  epochs) is roughly pruning_fraction 0.83, sparsity_warmup_fraction 0.2.
- Deterministic masks are 0/1 (the official code keeps survivors at a soft value folded into
  the weights); see `methods/_l0.py`. The hidden, head and layer masks start always on, the FFN
  dimension masks at `droprate_init`, as in the official code (see `methods/_l0.py` for why).
- A sub-layer whose heads (or intermediate dimensions) are all masked counts as removed even if
  its layer mask is on, in training as in export; see `methods/_surgery.py`.
- Dynamic matching considers a student layer surviving when either of its sub-layers does (the
  official code looks at the MHA mask only); a layer with just its FFN still transforms states.
- The order constraint defaults to on for the small GLUE tasks (CoLA, MRPC, RTE, STS-B), the
  sets the official recipe treats as small, and off elsewhere (`layer_order_constraint`).
- The loop clips the gradient norm over all trained parameters together, masks and multipliers
  included (the official code clips the model's parameters only).
- The surgery hits the target: when the binarised masks miss `target_sparsity` by more than
  `binarise_tolerance` (0.01), every log α is shifted by one offset that brings them onto it
  (`methods/_l0.py`, `binarise_at`). The Lagrangian controls the *expected* sparsity, and with a
  few thousand steps instead of the paper's 100 epochs it can still swing around the target when
  pruning ends (SST-2, 0.6 target at 4 epochs: 0.648 and 0.635 exported). The masks' ranking is
  kept; the trained sparsity and the offset are logged (`binarised_trained_sparsity`,
  `binarise_offset`). `binarise_tolerance: null` keeps the official behaviour.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertForSequenceClassification, PreTrainedModel

from methods._bert import forward_hidden_states
from methods._l0 import (
    LOG_ALPHA_MAX,
    LOG_ALPHA_MIN,
    HardConcreteMasks,
    LagrangeMultipliers,
    StructureMasks,
    binarise_at,
    expected_sparsity,
    lagrangian_penalty,
    target_sparsity_at,
)
from methods._losses import kd_loss, task_loss
from methods._pruned_bert import PrunedBertConfig, PrunedBertForSequenceClassification
from methods._surgery import (
    active_layers,
    check_supported,
    masked_forward,
    prune,
    pruned_config,
    pruned_sparsity,
)
from methods.base import (
    Batch,
    Method,
    ParamGroup,
    Phase,
    Progress,
    decay_groups,
)

# the Params name stays importable here: runs pickled before the split load it from this module
from methods.params.cofi import CoFiDeclaration, CoFiParams

# CoFi's "GLUE (small)" tasks: its README and scripts give them the longer schedule and the
# ordered layer matching.
SMALL_GLUE_TASKS = frozenset({"cola", "mrpc", "rte", "stsb"})

WARMUP, PRUNE, FINETUNE = "distill_warmup", "prune", "finetune"


# ----------------------------------------------------------------------------------------------
# pure functions: plan, teacher layers, dynamic layer matching
# ----------------------------------------------------------------------------------------------


def phase_steps(total_steps: int, warmup_fraction: float, pruning_fraction: float) -> tuple[int, int, int]:
    """(distillation warm-up, pruning, fine-tuning) steps, adding up to `total_steps`."""
    warmup = min(total_steps, round(total_steps * warmup_fraction))
    pruning = min(total_steps - warmup, round(total_steps * pruning_fraction))
    return warmup, pruning, total_steps - warmup - pruning


def distilled_teacher_layers(num_layers: int, stride: int) -> list[int]:
    """Every `stride`-th layer counted down from the top: 12 layers, stride 3 → [2, 5, 8, 11]."""
    return list(range(num_layers - 1, -1, -stride))[::-1]


def match_layers(distances: torch.Tensor, available: torch.Tensor, ordered: bool) -> list[int]:
    """For each teacher layer (row of `distances`, bottom to top) the student layer (column) it
    is matched to: the available one at the lowest distance.

    Ordered: rows are matched from the top down, each to the best available column strictly
    below the column matched by the row above; when there is none it shares that column. With no
    available column at all (every layer pruned) all rows take the last column, whose state is
    the embeddings' output carried through."""
    rows, columns = distances.shape
    available = available.detach().cpu().bool()
    distances = distances.detach().cpu()
    if not available.any():
        return [columns - 1] * rows
    if not ordered:
        masked = distances.masked_fill(~available, float("inf"))
        return masked.argmin(dim=1).tolist()
    matches: list[int] = []
    limit = columns
    for row in reversed(range(rows)):
        allowed = available & (torch.arange(columns) < limit)
        if allowed.any():  # always true for the top row: some column is available
            limit = int(distances[row].masked_fill(~allowed, float("inf")).argmin())
        matches.append(limit)
    return matches[::-1]


def layer_distillation_loss(
    student_states: list[torch.Tensor],
    teacher_states: list[torch.Tensor],
    layer_map: nn.Module,
    available: torch.Tensor,
    ordered: bool,
) -> torch.Tensor:
    """Σ over teacher layers of MSE(layer_map(student state), teacher state), each teacher layer
    matched to its closest surviving student layer (the matching itself carries no gradient)."""
    mapped = [layer_map(state) for state in student_states]
    with torch.no_grad():
        distances = torch.stack(
            [torch.stack([F.mse_loss(s.float(), t.float()) for s in mapped]) for t in teacher_states]
        )
    matches = match_layers(distances, available, ordered)
    losses = [F.mse_loss(mapped[s].float(), t.float()) for s, t in zip(matches, teacher_states)]
    return sum(losses[1:], losses[0])  # never empty: torch.stack above refuses no teacher layers


# ----------------------------------------------------------------------------------------------
# the trainable module and the deterministic-mask view of it
# ----------------------------------------------------------------------------------------------


class CoFiModel(nn.Module):
    """Everything trained: the student (masked copy, later the pruned model), the mask log α,
    the Lagrange multipliers and the layer map. After the surgery masks and multipliers are None."""

    def __init__(
        self,
        student: PreTrainedModel,
        masks: HardConcreteMasks | None,
        lagrangian: LagrangeMultipliers | None,
        layer_map: nn.Linear,
    ):
        super().__init__()
        self.student = student
        self.masks = masks
        self.lagrangian = lagrangian
        self.layer_map = layer_map


class DeterministicMaskedModel(nn.Module):
    """The masked student under deterministic 0/1 masks: what the pruning phase is scored as."""

    def __init__(self, model: CoFiModel):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **_: Any,
    ) -> torch.Tensor:
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        batch = {k: v for k, v in given.items() if v is not None}  # masked_forward reads a missing key as None
        assert self.model.masks is not None  # scored only before the surgery
        # the student is a BertForSequenceClassification until the surgery (CoFi.build checks the teacher)
        student = cast(BertForSequenceClassification, self.model.student)
        return masked_forward(student, batch, self.model.masks.deterministic())[1]


def identity_linear(size: int) -> nn.Linear:
    layer = nn.Linear(size, size)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(size))
        layer.bias.zero_()
    return layer


# ----------------------------------------------------------------------------------------------
# the method
# ----------------------------------------------------------------------------------------------


class CoFi(CoFiDeclaration, Method):

    params: CoFiParams
    model: CoFiModel

    def __init__(self, params: CoFiParams | Mapping[str, Any], ctx):
        super().__init__(params, ctx)
        self._phase: str | None = None
        self._target = 0.0
        self._binarisation: dict[str, float] = {}  # the surgery's trained sparsity and offset
        self._structure = 0  # bumped by every change of the module structure (surgery, reload)
        self._groups_structure: int | None = None  # the structure param_groups last handed out

    # -- helpers -------------------------------------------------------------------------------
    @property
    def _teacher(self) -> PreTrainedModel:
        if self.ctx.teacher is None:
            raise ValueError("cofi needs the fine-tuned teacher")
        return self.ctx.teacher

    @property
    def pruned(self) -> bool:
        return isinstance(self.model.student, PrunedBertForSequenceClassification)

    def _masks(self) -> HardConcreteMasks:
        """The masks' log α: they exist until the surgery (`pruned`)."""
        assert self.model.masks is not None, "cofi's masks are gone after the pruning surgery"
        return self.model.masks

    def _lagrangian(self) -> LagrangeMultipliers:
        """The Lagrange multipliers: they exist until the surgery (`pruned`)."""
        assert self.model.lagrangian is not None, "cofi's multipliers are gone after the pruning surgery"
        return self.model.lagrangian

    def _bert_student(self) -> BertForSequenceClassification:
        """The student before the surgery: a copy of the teacher, which cofi supports only as a
        BertForSequenceClassification (`build` runs `_surgery.check_supported`)."""
        return cast(BertForSequenceClassification, self.model.student)

    def _bert_teacher_config(self) -> BertConfig:
        """The teacher's config: a BertConfig, as cofi supports BERT teachers only (`_bert_student`)."""
        return cast(BertConfig, self._teacher.config)

    def _head_size(self) -> int:
        config = self._teacher.config
        return config.hidden_size // config.num_attention_heads

    def _ordered(self) -> bool:
        if self.params.layer_order_constraint == "auto":
            return self.ctx.task.name.lower().replace("-", "") in SMALL_GLUE_TASKS
        return self.params.layer_order_constraint == "on"

    def _masked_model(self) -> CoFiModel:
        """A trainable copy of the teacher with fresh masks, multipliers and an identity map."""
        teacher = self._teacher
        student = copy.deepcopy(teacher).train()
        for p in student.parameters():
            p.requires_grad_(True)
        config = teacher.config
        masks = HardConcreteMasks(
            config.num_hidden_layers, config.num_attention_heads, config.hidden_size, config.intermediate_size,
            self.params.droprate_init,
        )
        return CoFiModel(student, masks, LagrangeMultipliers(), identity_linear(config.hidden_size)).to(teacher.device)

    def _pruned_shape(self) -> dict[str, Any] | None:
        if not self.pruned:
            return None
        config = self.model.student.config
        return {
            "hidden_size": config.hidden_size,
            "layer_heads": list(config.layer_heads),
            "layer_intermediate": list(config.layer_intermediate),
        }

    def _restructure(self, shape: Mapping[str, Any] | None) -> None:
        """Rebuild the module's parts for a state of the other structure (a resume across the
        surgery); `self.model` stays the same object, its parameters are new."""
        device = next(self.model.parameters()).device
        if shape is None:
            parts = self._masked_model()
        else:
            config = pruned_config(
                self._bert_teacher_config(), shape["hidden_size"], shape["layer_heads"], shape["layer_intermediate"]
            )
            layer_map = nn.Linear(shape["hidden_size"], self._teacher.config.hidden_size)
            parts = CoFiModel(PrunedBertForSequenceClassification(config).train(), None, None, layer_map)
        for name in ("student", "masks", "lagrangian", "layer_map"):
            setattr(self.model, name, getattr(parts, name))
        self.model.to(device)
        self._structure += 1

    def _binarised(self) -> StructureMasks:
        """The surgery's masks: the deterministic ones, moved to the target when they miss it by
        more than `binarise_tolerance` (see `binarise_at`). Records what happened for on_step."""
        masks = self._masks().deterministic()
        trained = float(expected_sparsity(masks, self._head_size()))
        offset = 0.0
        tolerance = self.params.binarise_tolerance
        if tolerance is not None and abs(trained - self.params.target_sparsity) > tolerance:
            masks, offset = binarise_at(self._masks().log_alphas(), self._head_size(), self.params.target_sparsity)
        self._binarisation = {"binarised_trained_sparsity": trained, "binarise_offset": offset}
        return masks

    @torch.no_grad()
    def _prune_now(self) -> None:
        """The surgery between pruning and fine-tuning: binarise the masks, cut the model."""
        masks = self._binarised()
        student = prune(self._bert_student(), masks).train()
        hidden = torch.nonzero(masks.hidden).flatten()
        old_map = self.model.layer_map
        layer_map = nn.Linear(len(hidden), old_map.out_features).to(old_map.weight.device)
        layer_map.weight.copy_(old_map.weight[:, hidden])
        layer_map.bias.copy_(old_map.bias)
        self.model.student = student
        self.model.layer_map = layer_map
        self.model.masks = None
        self.model.lagrangian = None
        self._structure += 1

    def _distilling(self) -> bool:
        return not (self.pruned and not self.params.finetune_distill)

    # -- hooks ---------------------------------------------------------------------------------
    def build(self) -> nn.Module:
        check_supported(self._teacher)
        self.model = self._masked_model()
        return self.model

    def phases(self, total_steps: int) -> list[Phase]:
        warmup, pruning, finetune = phase_steps(
            total_steps, self.params.distill_warmup_fraction, self.params.pruning_fraction
        )
        return [
            Phase(WARMUP, warmup, trainable=("student",), select=False, warmup_ratio=0.0),
            Phase(PRUNE, pruning, trainable=("student", "masks", "lagrangian"), select=False, warmup_ratio=0.0),
            Phase(FINETUNE, finetune, trainable=("student",), warmup_ratio=0.0),
        ]

    def start_phase(self, phase: Phase) -> None:
        self._phase = phase.name
        if phase.name == PRUNE and not self.pruned:
            # pruning starts from clamped always-on masks even with no warm-up step before it
            # (methods/_l0.py); after that, after_optimizer_step keeps them in range
            self._masks().clamp_()
        if phase.name == FINETUNE and not self.pruned:
            self._prune_now()

    def param_groups(self, phase: Phase) -> list[ParamGroup]:
        lr = self.params.learning_rate or self.ctx.learning_rate
        if phase.name == FINETUNE:
            lr = self.params.finetune_learning_rate or lr
        named = [
            (name, p)
            for name, p in self.model.student.named_parameters()
            if not (self.params.freeze_embeddings and name.startswith("bert.embeddings."))
        ]
        if self.params.distill_layer_weight > 0 and self._distilling():
            named += [(f"layer_map.{name}", p) for name, p in self.model.layer_map.named_parameters()]
        schedule: Literal["linear", "constant"] = "linear" if phase.name == PRUNE else "constant"
        groups = decay_groups("student", named, lr, self.ctx.weight_decay, schedule=schedule)
        if phase.name == PRUNE:
            reg_lr = self.params.reg_learning_rate
            groups.append(ParamGroup("masks", list(self._masks().parameters()), reg_lr, schedule="constant",
                                     bounds=(LOG_ALPHA_MIN, LOG_ALPHA_MAX)))
            groups.append(
                ParamGroup("lagrangian", list(self._lagrangian().parameters()), reg_lr, maximize=True, schedule="constant")
            )
        self._groups_structure = self._structure
        return groups

    def on_step(self, progress: Progress) -> dict[str, float]:
        if progress.phase == PRUNE and not self.pruned:
            warmup = round(self.params.sparsity_warmup_fraction * progress.phase_steps)
            self._target = target_sparsity_at(progress.phase_step, warmup, self.params.target_sparsity)
            with torch.no_grad():
                sparsity = expected_sparsity(self._masks().keep_probabilities(), self._head_size())
            return {
                "target_sparsity": self._target,
                "expected_sparsity": float(sparsity),
                "lambda1": float(self._lagrangian().lambda1.detach()),
                "lambda2": float(self._lagrangian().lambda2.detach()),
            }
        if self.pruned:
            pruned = cast(PrunedBertConfig, self.model.student.config)  # the surgery's PrunedBertForSequenceClassification
            return {"sparsity": pruned_sparsity(self._bert_teacher_config(), pruned), **self._binarisation}
        return {}

    def after_optimizer_step(self, progress: Progress) -> None:
        """Clamp log α to its range after every optimizer step while the masks exist, in every
        phase before the surgery, as the official trainer does (`constrain_parameters` after each
        step): the first pruning step then already sees clamped always-on masks, and the
        evaluations during pruning and the surgery rank clamped values (see `methods/_l0.py`).
        While the masks train, their group's `bounds` make the loop clamp DeepSpeed's fp32
        masters too, which this clamp of the parameters cannot reach."""
        if not self.pruned:
            self._masks().clamp_()

    def loss(self, batch: Batch, progress: Progress) -> dict[str, torch.Tensor]:
        if self._groups_structure is not None and self._groups_structure != self._structure:
            raise RuntimeError(
                "cofi's module was rebuilt (a state from the other side of the pruning surgery was loaded) after "
                "param_groups handed its parameters to the optimizer; load a mid-phase state before param_groups"
            )
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        with torch.no_grad():
            teacher_states, teacher_logits = forward_hidden_states(self._teacher, inputs)
        student = self.model.student
        pruning = progress.phase == PRUNE and not self.pruned
        if self.pruned:
            output = student(**inputs, output_hidden_states=True)
            states, logits = list(output.hidden_states), output.logits
            available = torch.ones(max(1, len(states) - 1), dtype=torch.bool)
        elif pruning:
            masks = self._masks().sample()
            states, logits = masked_forward(self._bert_student(), inputs, masks)
            available = active_layers(masks)
        else:
            states, logits = forward_hidden_states(student, inputs)
            available = torch.ones(len(states) - 1, dtype=torch.bool)

        regression = self.ctx.task.regression
        terms: dict[str, torch.Tensor] = {}
        if not self._distilling():
            terms["task"] = task_loss(logits, batch["labels"], regression)
        else:
            p = self.params
            if p.distill_pred_weight > 0:
                terms["distill_pred"] = p.distill_pred_weight * kd_loss(logits, teacher_logits, p.distill_temperature, regression)
            if p.distill_layer_weight > 0:
                layers = distilled_teacher_layers(len(teacher_states) - 1, p.distill_layer_stride)
                # a pruned model left without layers offers its embeddings' output instead
                student_layers = states[1:] or states[:1]
                terms["distill_layer"] = p.distill_layer_weight * layer_distillation_loss(
                    student_layers, [teacher_states[1 + t] for t in layers], self.model.layer_map, available, self._ordered()
                )
            if p.task_weight > 0:
                terms["task"] = p.task_weight * task_loss(logits, batch["labels"], regression)
        if pruning:
            sparsity = expected_sparsity(self._masks().keep_probabilities(), self._head_size())
            multipliers = self._lagrangian()
            terms["lagrangian"] = lagrangian_penalty(sparsity, self._target, multipliers.lambda1, multipliers.lambda2)
        return terms

    def eval_model(self) -> nn.Module:
        if not self.pruned and self._phase == PRUNE:
            return DeterministicMaskedModel(self.model)
        return self.model.student

    def export(self) -> PreTrainedModel:
        """The pruned model; before the surgery, the pruning of what eval_model() scores (the
        deterministic masks during `prune`, all-ones masks before it)."""
        if self.pruned:
            return copy.deepcopy(self.model.student).eval()
        if self._phase == PRUNE:
            masks = self._masks().deterministic()
        else:
            masks = self._masks().log_alphas().map(torch.ones_like)
        return prune(self._bert_student(), masks).eval()

    def state_dict(self) -> dict[str, Any]:
        """The module's tensors (student, log α, λ1, λ2, layer map) and, once pruned, the pruned
        shape, so a state from either side of the surgery can be restored into either side."""
        state = super().state_dict()
        state["pruned_shape"] = self._pruned_shape()
        state["binarisation"] = dict(self._binarisation)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Loads in place when the structure matches. Otherwise (resuming across the surgery:
        the loop replays start_phase on a freshly built model) the module is rebuilt first, which
        replaces its parameters: the loop must then call param_groups afterwards."""
        if state["pruned_shape"] != self._pruned_shape():
            self._restructure(state["pruned_shape"])
        self._binarisation = dict(state.get("binarisation", {}))
        super().load_state_dict(state)
