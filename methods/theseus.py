"""BERT-of-Theseus: compression by progressive module replacing.

Paper: Xu et al. 2020, "BERT-of-Theseus", arXiv 2002.02925; official code JetRunner/BERT-of-Theseus.

- Student: n successor layers, each replacing one predecessor module of consecutive fine-tuned
  teacher layers — uniform by default (12→6 pairs, 6→3 pairs, 6→2 triples), or an explicit
  `split` such as [3, 2, 1]. Successors start as copies of the teacher's bottom n layers (the
  paper's best; `init: top` and `every_kth` for comparison). See `_replacing.py`.
- Replacing: for every batch one Bernoulli(p) draw per module from torch's global generator (the
  same decision for the whole batch): 1 runs the successor, 0 the predecessor; the branch not
  chosen is not computed. Predecessors, embeddings and the head are frozen; gradients reach a
  successor through the active predecessors above it.
- Loss: the task loss only (cross-entropy; MSE for regression).
- Schedules (`_schedules.py`, pure functions of the optimizer step t): `linear` curriculum
  p(t) = min(1, b + k·t), given as (b, k) or as (b, steps or fraction of training until p = 1);
  `constant` p = b; `anti_curriculum` 1 − min(1, b + k·t).
- Phases: with the curriculum one phase, `replacing`, in which p reaches 1 and stays there (the
  paper's replacing and successor fine-tuning merge); with `constant` and `anti_curriculum`,
  `replacing` for R steps, then `successor_finetune` with p = 1 for the rest of training. From
  p = 1 on no predecessor runs, so a step costs a student step.
- Evaluation: the pure student (every successor) throughout — a valid, exportable model at any
  step — so every evaluation may be selected as the best.
- Export: the student, a stock n-layer `BertForSequenceClassification` (teacher embeddings and
  head, successor layers), as the official `convert_to_hf_ckpt.py` produces.

Where drydock differs from the paper and the official code, deliberately:
- Each phase gets its own LR warm-up and linear decay (the loop builds one optimizer per phase);
  the official code runs one schedule across replacing and successor fine-tuning.
- The anti-curriculum (the paper's Table 6; not in the official code) ends in successor
  fine-tuning, so the exported successors finish trained alone, as with the constant rate.
- Steps until p = 1 may be given as a fraction of training (the shipped sweep does): the paper's
  counts ({1k, 5k, 10k, 30k} steps) assume full GLUE training sets.
- Draws happen per micro-batch and per DDP rank (the loop seeds ranks differently), as each
  forward pass draws in the official code.
- A successor whose predecessor ran gets a zero gradient rather than none, so every successor
  takes every optimizer step — what the official code's zeroing `zero_grad()` did, and what a
  batch that ran no successor needs to be backpropagated at all (see `zero_gradient_anchor`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from methods._losses import task_loss
from methods._replacing import (
    ModuleReplacingMethod,
    zero_gradient_anchor,
)
from methods._schedules import (
    replacement_rate,
    replacing_phase_steps,
    steps_until_full_rate,
)
from methods.base import Batch, MethodContext, Phase, Progress

# the Params name stays importable here: runs pickled before the split load it from this module
from methods.params.theseus import TheseusDeclaration, TheseusParams


def sample_successors(num_modules: int, rate: float) -> list[bool]:
    """One Bernoulli(rate) per module from torch's global generator (seeded by the loop): True
    runs the successor. Drawn on the CPU so no accelerator synchronisation is needed."""
    return torch.bernoulli(torch.full((num_modules,), float(rate))).bool().tolist()


class Theseus(TheseusDeclaration, ModuleReplacingMethod):

    params: TheseusParams

    def __init__(self, params: TheseusParams | Mapping[str, Any], ctx: MethodContext):
        super().__init__(params, ctx)
        # the value at step 0, until the loop's first on_step
        self.replacement_rate = replacement_rate(0, self.params.schedule, self.params.base_rate, math.inf)

    def _full_rate_step(self, total_steps: int) -> float:
        p = self.params
        return steps_until_full_rate(p.base_rate, total_steps, p.slope, p.replacing_steps, p.replacing_fraction)

    def phases(self, total_steps: int) -> list[Phase]:
        if self.params.schedule == "linear":
            return [Phase("replacing", total_steps, trainable=("successors",))]
        replacing = replacing_phase_steps(self._full_rate_step(total_steps), total_steps)
        plan = [
            Phase("replacing", replacing, trainable=("successors",)),
            Phase("successor_finetune", total_steps - replacing, trainable=("successors",)),
        ]
        return [phase for phase in plan if phase.steps > 0]

    def on_step(self, progress: Progress) -> dict[str, float]:
        p = self.params
        self.replacement_rate = replacement_rate(
            progress.step, p.schedule, p.base_rate, self._full_rate_step(progress.total_steps)
        )
        return {"replacement_rate": self.replacement_rate}

    def loss(self, batch: Batch, progress: Progress) -> dict[str, torch.Tensor]:
        use_successor = sample_successors(self.model.num_modules, self.replacement_rate)
        logits = self.model(
            input_ids=batch["input_ids"],
            attention_mask=batch.get("attention_mask"),
            token_type_ids=batch.get("token_type_ids"),
            use_successor=use_successor,
        )
        loss = task_loss(logits, batch["labels"], self.ctx.task.regression)
        idle = [p for used, layer in zip(use_successor, self.model.successors) if not used for p in layer.parameters()]
        if idle:
            loss = loss + zero_gradient_anchor(idle)
        return {"task": loss}
