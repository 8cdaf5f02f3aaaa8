"""Deterministic Continuous Replacement (DCR) with Deep Feature Guidance.

Paper: "Deterministic Continuous Replacement", NeurIPS 2025 ScaleOPT workshop. No public code;
this follows the paper's description (docs/stack-facts.md, "DCR has no public code").

- Student and modules: as BERT-of-Theseus (`_replacing.py`): n successor layers, each paired
  with a module of consecutive frozen teacher layers (uniform split by default, or `split`),
  starting as copies of the teacher's bottom n layers.
- Blend: every module computes both branches and passes on
  y = alpha(t)·predecessor(x) + (1 − alpha(t))·successor(x), with one global alpha(t) annealed
  from 1 (teacher only) to 0 (student only). Nothing is sampled, which removes the gradient
  variance p(1 − p)·E‖a‖² that Bernoulli gating adds. Once alpha = 0 the predecessors are no
  longer run and a step costs a student step; while blending it costs at most a teacher step
  plus a student step (no weight gradients for the frozen predecessors).
- Schedules (`_schedules.py`, pure functions of the training fraction): `aggr20` (default; 1 → 0.3
  over the first 10% of training, 0.3 → 0 over the next 10%, then 0), `linear` (1 → 0 over
  `anneal_fraction`), `piecewise` (any list of (fraction, alpha) points).
- Loss: L = L_task + lambda(t)·Σ_modules MSE(successor(x), predecessor(x)), the predecessor's output
  on the same input detached as the target — Deep Feature Guidance, free because both branches
  are computed anyway. lambda(t) = dfg_weight·alpha(t): the same annealing as the blend. Task
  loss: cross-entropy (MSE for regression).
- Variant `gate: gumbel`, the paper's Theseus-Gumbel baseline: per module and batch a soft
  stochastic gate g ~ relaxed Bernoulli(P(teacher) = alpha(t), temperature 1.0) replaces alpha.
- One phase, `blending`; the pure student is evaluated throughout (valid at any step, so every
  evaluation may be selected) and exported as a stock n-layer `BertForSequenceClassification`.

Choices drydock makes where the paper leaves room:
- The feature MSE is a mean over hidden units of real (non-padding) tokens per module, summed
  over modules; the paper writes a squared norm, whose scale would grow with hidden size and
  sequence length and make dfg_weight incomparable across models.
- Predecessors run in the hybrid's mode, so their dropout is active in training, as in Theseus;
  the target carries that noise.
- The gumbel gate is drawn once per module per batch, like Theseus' Bernoulli decisions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from methods._losses import task_loss
from methods._replacing import ModuleReplacingMethod, ReplacingModel
from methods._schedules import (
    AGGR20,
    linear_anneal_points,
    piecewise_linear,
)
from methods.base import Batch, MethodContext, Phase, Progress

# the Params name stays importable here: runs pickled before the split load it from this module
from methods.params.dcr import DCRDeclaration, DCRParams

# the open interval keeps log(u) and log(1 − u) finite
_UNIFORM_EPS = 1e-6


def blend_points(params: DCRParams) -> tuple[tuple[float, float], ...]:
    if params.schedule == "aggr20":
        return AGGR20
    if params.schedule == "linear":
        return linear_anneal_points(params.anneal_fraction)
    return tuple(params.points or ())


def gumbel_gates(alpha: float, num_modules: int, temperature: float) -> list[float]:
    """Relaxed-Bernoulli (binary concrete) gates with P(teacher) = alpha, one per module, from
    torch's global generator: sigmoid((logit(alpha) + log u − log(1 − u)) / temperature).

    At alpha 0 or 1 the gate is alpha exactly (the logit is infinite), so the endpoints behave
    like the deterministic blend — in particular, no teacher branch once alpha reaches 0.
    """
    if alpha <= 0.0 or alpha >= 1.0:
        return [float(alpha)] * num_modules
    u = torch.rand(num_modules, dtype=torch.float64).clamp(_UNIFORM_EPS, 1.0 - _UNIFORM_EPS)
    logistic_noise = torch.log(u) - torch.log1p(-u)
    logit = math.log(alpha) - math.log1p(-alpha)
    return torch.sigmoid((logit + logistic_noise) / temperature).tolist()


def blended_forward(
    model: ReplacingModel, inputs: dict[str, torch.Tensor], gates: Sequence[float]
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Logits of the blended hybrid, and the (successor, predecessor) outputs of every module
    whose teacher branch ran (gate > 0) — the pairs Deep Feature Guidance compares."""
    if len(gates) != model.num_modules:
        raise ValueError(f"{len(gates)} gates for {model.num_modules} modules")
    hidden, mask = model.embed(inputs)
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    for index, gate in enumerate(gates):
        successor_out = model.run_successor(index, hidden, mask)
        if gate == 0.0:
            hidden = successor_out
            continue
        predecessor_out = model.run_predecessor(index, hidden, mask)
        hidden = gate * predecessor_out + (1.0 - gate) * successor_out
        pairs.append((successor_out, predecessor_out))
    return model.classify(hidden), pairs


def feature_guidance_loss(
    pairs: Sequence[tuple[torch.Tensor, torch.Tensor]], attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """Σ over modules of the mean squared difference between the successor's and the (detached)
    predecessor's outputs, over the hidden units of real tokens: padding carries no text, and
    the teacher is the target, never pulled towards the student."""
    if not pairs:
        raise ValueError("no modules to guide")
    successor_out = pairs[0][0]
    if attention_mask is None:
        token_weight = successor_out.new_ones(successor_out.shape[:-1], dtype=torch.float32)
    else:
        token_weight = attention_mask.float()  # float32 even under bf16: exact token counts
    token_weight = token_weight.unsqueeze(-1)
    count = token_weight.sum() * successor_out.shape[-1]
    total = token_weight.new_zeros(())
    for successor, predecessor in pairs:
        squared = (successor.float() - predecessor.detach().float()) ** 2
        total = total + (squared * token_weight).sum() / count
    return total


class DeterministicContinuousReplacement(DCRDeclaration, ModuleReplacingMethod):

    params: DCRParams

    def __init__(self, params: DCRParams | Mapping[str, Any], ctx: MethodContext):
        super().__init__(params, ctx)
        self.points = blend_points(self.params)
        # the values at step 0, until the loop's first on_step
        self.blend = piecewise_linear(0.0, self.points)
        self.dfg_weight = self.params.dfg_weight * self.blend

    def phases(self, total_steps: int) -> list[Phase]:
        return [Phase("blending", total_steps, trainable=("successors",))]

    def on_step(self, progress: Progress) -> dict[str, float]:
        self.blend = piecewise_linear(progress.fraction, self.points)
        self.dfg_weight = self.params.dfg_weight * self.blend
        return {"blend": self.blend, "dfg_weight": self.dfg_weight}

    def gates(self) -> list[float]:
        if self.params.gate == "gumbel":
            return gumbel_gates(self.blend, self.model.num_modules, self.params.gate_temperature)
        return [self.blend] * self.model.num_modules

    def loss(self, batch: Batch, progress: Progress) -> dict[str, torch.Tensor]:
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        logits, pairs = blended_forward(self.model, inputs, self.gates())
        terms = {"task": task_loss(logits, batch["labels"], self.ctx.task.regression)}
        if pairs:
            feature_mse = feature_guidance_loss(pairs, batch.get("attention_mask"))
            if self.dfg_weight > 0:
                terms["feature_guidance"] = self.dfg_weight * feature_mse
            terms["_feature_mse"] = feature_mse.detach()
        return terms
