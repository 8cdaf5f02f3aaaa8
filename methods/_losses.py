"""Loss functions shared by the distillation methods: pure functions on tensors.

Conventions (documented once here so every method agrees):
- `kd_loss` is Hinton's soft-target term T²·KL(softmax(t/T) || softmax(s/T)); the T² keeps its
  gradient scale independent of T. It is averaged over the batch ("batchmean", the true KL per
  example, as CoFi's official trainer computes it) unless a method asks for "mean": PyTorch's
  element mean over batch × classes, what PKD's official `src/KD_loss.py` computes (KLDivLoss's
  default), which is 1/C of the batchmean value. The two are not interchangeable: a method's
  alpha and beta were tuned against one of them.
- Regression tasks (one output) have no distribution to match: the soft-target term becomes the
  mean squared error between student and teacher outputs.
- `patience_loss` (PKD) averages its squared errors over elements, as the official code does.
- Relation losses (MiniLM) are KL(teacher || student) of row distributions, averaged over heads
  and real (non-padding) query positions per example, then over the batch.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F


def task_loss(logits: torch.Tensor, labels: torch.Tensor, regression: bool) -> torch.Tensor:
    """Cross-entropy for classification, MSE for regression (one output)."""
    if regression:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels)


def kd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float,
    regression: bool,
    reduction: Literal["batchmean", "mean"] = "batchmean",
) -> torch.Tensor:
    """T²·KL(teacher || student) at temperature T, per example ("batchmean") or per element
    ("mean": also divided by the number of classes); MSE on the outputs for regression."""
    if regression:
        return F.mse_loss(student_logits.float(), teacher_logits.float())
    t = temperature
    log_p_student = F.log_softmax(student_logits.float() / t, dim=-1)
    p_teacher = F.softmax(teacher_logits.float() / t, dim=-1)
    return F.kl_div(log_p_student, p_teacher, reduction=reduction) * (t * t)


# ----------------------------------------------------------------------------------------------
# Patient KD: intermediate [CLS] states
# ----------------------------------------------------------------------------------------------


def patience_loss(student_states: torch.Tensor, teacher_states: torch.Tensor, normalize: bool = True) -> torch.Tensor:
    """PKD's patient-teacher term between matched [CLS] vectors, shaped (..., hidden).

    Mean squared error **averaged over every element** (batch × matched layers × hidden), after
    L2-normalising each vector when `normalize` is set: what the official code computes
    (`F.mse_loss` on `F.normalize(…, dim=2)`). TextBrewer's `pkd_loss` sums over the hidden
    dimension instead, so its beta is about `hidden` times smaller than this one for the same
    effect; the betas are not interchangeable.
    """
    student, teacher = student_states.float(), teacher_states.float()
    if normalize:
        student = F.normalize(student, p=2, dim=-1)
        teacher = F.normalize(teacher, p=2, dim=-1)
    return F.mse_loss(student, teacher)


# ----------------------------------------------------------------------------------------------
# MiniLM: self-attention relations
# ----------------------------------------------------------------------------------------------

# relation name -> the two projections whose scaled dot products it normalises over keys
# (MiniLM v1: attention = query·key, value relation = value·value; MiniLMv2 adds the other two)
SELF_ATTENTION_RELATIONS: dict[str, tuple[str, str]] = {
    "attention": ("query", "key"),
    "value_relation": ("value", "value"),
    "query_relation": ("query", "query"),
    "key_relation": ("key", "key"),
}


def split_relation_heads(states: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(batch, length, width) → (batch, heads, length, width / heads).

    The model's heads are contiguous slices of the concatenated projection, so splitting into
    the model's own head count gives exactly its heads; splitting into another count gives
    MiniLMv2's relation heads, which lets teacher and student have different head counts."""
    batch, length, width = states.shape
    if width % num_heads:
        raise ValueError(f"width {width} cannot be split into {num_heads} relation heads")
    return states.reshape(batch, length, num_heads, width // num_heads).transpose(1, 2)


def relation_log_probs(left: torch.Tensor, right: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """log softmax(left·rightᵀ / √d) over key positions, padded keys excluded.

    `left`, `right`: (batch, heads, length, d); `attention_mask`: (batch, length), 1 = token.
    With left = queries and right = keys this is the attention distribution of each head; with
    values on both sides it is MiniLM's value relation. Whatever d is, the result is
    (batch, heads, length, length), so students of any width compare with the teacher.
    A large finite negative (not −inf) marks padded keys so their zero probabilities never meet
    a −inf − (−inf) in the KL. Computed in float32 even under bf16 autocast: the KL compares
    distributions that differ in the third digit."""
    with torch.autocast(device_type=left.device.type, enabled=False):
        scores = left.float() @ right.float().transpose(-1, -2) / math.sqrt(left.shape[-1])
        padded_keys = ~attention_mask.bool()[:, None, None, :]
        scores = scores.masked_fill(padded_keys, torch.finfo(scores.dtype).min)
        return F.log_softmax(scores, dim=-1)


def relation_kl(teacher_log_probs: torch.Tensor, student_log_probs: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) of each (head, query) row, averaged over heads and the real query
    positions of each example (the paper's 1/(A_h·|x|) normalisation), then over the batch.

    Padded positions take no part: their keys have zero probability on both sides and their
    query rows are left out of the average, so extra padding leaves the value unchanged."""
    tokens = attention_mask.bool()
    pointwise = teacher_log_probs.exp() * (teacher_log_probs - student_log_probs)
    pointwise = pointwise.masked_fill(~tokens[:, None, None, :], 0.0)
    per_query = pointwise.sum(-1) * tokens[:, None, :]  # (batch, heads, length)
    heads = per_query.shape[1]
    per_example = per_query.sum((1, 2)) / (tokens.sum(-1).clamp(min=1) * heads)
    return per_example.mean()


def self_attention_relation_losses(
    teacher: dict[str, torch.Tensor],
    student: dict[str, torch.Tensor],
    attention_mask: torch.Tensor,
    relation_heads: int,
    relations: tuple[str, ...] = ("attention", "value_relation"),
) -> dict[str, torch.Tensor]:
    """MiniLM's deep self-attention distillation terms, one per relation name.

    `teacher` and `student` map "query", "key", "value" to the concatenated projections of the
    distilled layer, (batch, length, width); the widths may differ. Both sides are split into
    `relation_heads` heads. The terms are returned unweighted: MiniLM adds them as they are."""
    losses = {}
    for name in relations:
        left, right = SELF_ATTENTION_RELATIONS[name]
        teacher_log_probs = relation_log_probs(
            split_relation_heads(teacher[left], relation_heads), split_relation_heads(teacher[right], relation_heads), attention_mask
        )
        student_log_probs = relation_log_probs(
            split_relation_heads(student[left], relation_heads), split_relation_heads(student[right], relation_heads), attention_mask
        )
        losses[name] = relation_kl(teacher_log_probs, student_log_probs, attention_mask)
    return losses
