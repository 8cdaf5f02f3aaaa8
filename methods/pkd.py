"""Patient Knowledge Distillation (Sun et al. 2019, arXiv 1908.09355;
intersun/PKD-for-BERT-Model-Compression).

- Student: the bottom m encoder layers (plus embeddings and head) of the fine-tuned teacher, or
  explicit `layers`; `init_from: pretrained` takes them from the pretrained checkpoint instead.
- One phase. Loss (official `src/KD_loss.py`):

      (1 − alpha)·CE(student, labels) + alpha·T²·KL(softmax(z_t/T) || softmax(z_s/T))/C + beta·L_PT

  The KL term is averaged over batch × C classes, as the official code's `nn.KLDivLoss()` (its
  default reduction, 'mean') computes it: 1/C of vanilla KD's per-example value. The official
  alpha/T/beta were tuned with that balance; a per-example KL would weigh the soft targets
  C times as much against CE and L_PT (2× on SST-2, 3× on MNLI).
  where L_PT is the mean squared error between the L2-normalised [CLS] hidden states of every
  intermediate student layer j and of its teacher layer I(j). The squared errors are **averaged
  over elements** (batch × layers × hidden), as the official code does; other toolkits
  (TextBrewer's `pkd_loss`) sum over the hidden dimension, so their beta is about `hidden`
  times smaller for the same effect and the two are not comparable. The student's last layer
  is not in L_PT: the soft targets already cover it through the head. Regression tasks use the
  MSE in place of both CE and KL; L_PT is unchanged.
- Layer maps I (0-based teacher layer indices, one per intermediate student layer j = 0…m−2),
  for a teacher of depth L and a student of depth m:
    * `skip`: every (L/m)-th teacher layer, 1-based ⌊(j+1)·L/m⌋ — 12→6: 1-based 2, 4, 6, 8,
      10 (0-based 1, 3, 5, 7, 9); 6→3: 1-based 2, 4 (0-based 1, 3). The floor extends it to
      depths that do not divide (it stays strictly increasing and below the final layer).
    * `last`: the m − 1 teacher layers just below the final one — 12→6: 1-based 7…11
      (0-based 6…10).
    The official scripts fix one map per depth: 12→6 is `skip`; 12→3 uses 0-based 9, 10, which
    is `last` (`skip` gives 3, 7 there), so set `layer_map: last` to reproduce their 3-layer runs.
    * an explicit list of m − 1 strictly increasing 0-based indices below the final layer.
- Teacher logits and hidden states are computed on the fly under no_grad (the official code
  pickles them beforehand; the values are the same, the teacher being frozen and in eval mode).
- Export: the student, a stock m-layer `BertForSequenceClassification`.

Where drydock differs: the paper (and the official code's default `encoder_checkpoint`)
initialises the student from the *pretrained* BERT's bottom layers; drydock starts from the
fine-tuned teacher's, like its other layer-dropping methods, and `init_from: pretrained`
restores the paper's choice. Defaults are the official PKD-skip settings (alpha 0.7, T 10,
beta 500, normalised).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from methods._bert import forward_hidden_states, num_layers
from methods._losses import kd_loss, patience_loss, task_loss
from methods.base import Batch, Progress
from methods.kd import KnowledgeDistillation

# the Params name stays importable here: runs pickled before the split load it from this module
from methods.params.pkd import PKDDeclaration, PKDParams


def pkd_layer_map(teacher_layers: int, student_layers: int, layer_map: str | Sequence[int]) -> list[int]:
    """0-based teacher layer index for each intermediate student layer 0…m−2 (see the module
    docstring for `skip` and `last`); an explicit list is checked and returned as is."""
    if not 1 <= student_layers <= teacher_layers:
        raise ValueError(f"a {student_layers}-layer student does not fit a {teacher_layers}-layer teacher")
    intermediate = student_layers - 1
    if layer_map == "skip":
        return [(j + 1) * teacher_layers // student_layers - 1 for j in range(intermediate)]
    if layer_map == "last":
        return list(range(teacher_layers - student_layers, teacher_layers - 1))
    if isinstance(layer_map, str):
        raise ValueError(f"layer_map must be 'skip', 'last' or a list of teacher layer indices, got {layer_map!r}")
    chosen = list(layer_map)
    if len(chosen) != intermediate:
        raise ValueError(
            f"layer_map {chosen} must give {intermediate} teacher layers, one per intermediate layer "
            f"of the {student_layers}-layer student"
        )
    if any(not 0 <= i < teacher_layers - 1 for i in chosen):
        raise ValueError(
            f"layer_map {chosen} must hold 0-based indices in [0, {teacher_layers - 1}): intermediate "
            f"layers of the {teacher_layers}-layer teacher (its final layer is matched through the logits)"
        )
    if sorted(set(chosen)) != chosen:
        raise ValueError(f"layer_map {chosen} must be strictly increasing")
    return chosen


def cls_states(hidden_states: Sequence[torch.Tensor], layers: Sequence[int]) -> torch.Tensor:
    """(batch, len(layers), hidden): the [CLS] vector after each 0-based layer in `layers`.

    `hidden_states` is forward_hidden_states' list, whose entry 0 is the embeddings output, so
    layer i's output is entry i + 1."""
    return torch.stack([hidden_states[i + 1][:, 0] for i in layers], dim=1)


class PatientKD(PKDDeclaration, KnowledgeDistillation):

    params: PKDParams
    teacher_layers: list[int]  # 0-based teacher layer matched by each intermediate student layer

    def build(self) -> PreTrainedModel:
        if self.ctx.teacher is None:
            raise ValueError("pkd needs the fine-tuned teacher")
        model = super().build()
        self.teacher_layers = pkd_layer_map(num_layers(self.ctx.teacher), num_layers(model), self.params.layer_map)
        return model

    def loss(self, batch: Batch, progress: Progress) -> dict[str, torch.Tensor]:
        student_states, student_logits = forward_hidden_states(self.model, batch)
        assert self.ctx.teacher is not None  # build() refuses to run without it
        with torch.no_grad():
            teacher_states, teacher_logits = forward_hidden_states(self.ctx.teacher, batch)
        alpha, regression = self.params.alpha, self.ctx.task.regression
        terms = {"kd": alpha * kd_loss(student_logits, teacher_logits, self.params.temperature, regression, reduction="mean")}
        if alpha < 1:
            terms["task"] = (1 - alpha) * task_loss(student_logits, batch["labels"], regression)
        if self.teacher_layers and self.params.beta > 0:
            student_cls = cls_states(student_states, range(len(self.teacher_layers)))
            teacher_cls = cls_states(teacher_states, self.teacher_layers)
            terms["patience"] = self.params.beta * patience_loss(student_cls, teacher_cls, self.params.normalize)
        return terms
