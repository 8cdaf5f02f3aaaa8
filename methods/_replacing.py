"""Module replacing, shared by BERT-of-Theseus (`theseus.py`) and DCR (`dcr.py`).

Both methods cut the fine-tuned teacher's encoder into n consecutive groups of layers, the
predecessor modules, and pair each with one successor layer; training mixes the two at every
module boundary (Theseus samples, DCR blends) until only successors remain. What they share
lives here:

- `module_groups` / `successor_init_layers` / `resolve_modules`: which teacher layers form each
  module and which teacher layer each successor starts as (pure functions, validated).
- `ReplacingModel`: the hybrid module `build` returns — the student (teacher embeddings and head,
  frozen; successor layers, trainable) plus frozen copies of the predecessor layers — with the
  pieces a hybrid forward is made of, and Theseus' per-module choice as its `forward`.
- `ModuleReplacingMethod`: the hooks both methods implement identically (build, param groups,
  evaluation and export of the pure student, state).

Predecessors are copies, not references, of the teacher's layers: the loop sets the hybrid's
train/eval mode and device as one module, and a copy keeps that from reaching `ctx.teacher`.
They run in the hybrid's mode, so their dropout is active during training, as in the official
Theseus code (the whole model is in train mode there).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn
from transformers import PreTrainedModel

from methods._bert import (
    classify,
    embed,
    encoder_layers,
    num_layers,
    run_layers,
    student_from_layers,
    student_layer_indices,
)
from methods.base import (
    Method,
    ParamGroup,
    Phase,
    StudentDefaults,
    decay_groups,
    freeze,
)

# the Params name stays importable here: runs pickled before the split load it from this module
from methods.params.replacing import ReplacingParams, SuccessorInit

# ----------------------------------------------------------------------------------------------
# which layers
# ----------------------------------------------------------------------------------------------


def module_groups(teacher_depth: int, num_modules: int, split: Sequence[int] | None = None) -> list[list[int]]:
    """Teacher layer indices of each predecessor module, bottom module first.

    Default: sizes as equal as possible (12→6 pairs, 6→2 triples; 6→4 gives [2, 2, 1, 1], the
    larger modules at the bottom). An explicit `split` gives the sizes and must cover every
    teacher layer exactly once, in order — i.e. be positive and sum to the teacher's depth.
    """
    if not 1 <= num_modules <= teacher_depth:
        raise ValueError(f"cannot split a {teacher_depth}-layer teacher into {num_modules} modules (need 1..{teacher_depth})")
    if split is None:
        size, extra = divmod(teacher_depth, num_modules)
        sizes = [size + (1 if i < extra else 0) for i in range(num_modules)]
    else:
        sizes = list(split)
        if len(sizes) != num_modules:
            raise ValueError(f"split {sizes} has {len(sizes)} modules but the student has {num_modules} successor layers")
        if any(s < 1 for s in sizes) or sum(sizes) != teacher_depth:
            raise ValueError(
                f"split {sizes} must cover every one of the teacher's {teacher_depth} layers exactly once, in order "
                f"(positive sizes summing to {teacher_depth}; these sum to {sum(sizes)})"
            )
    groups, start = [], 0
    for size in sizes:
        groups.append(list(range(start, start + size)))
        start += size
    return groups


def successor_init_layers(groups: Sequence[Sequence[int]], init: SuccessorInit) -> list[int]:
    """The teacher layer each successor starts as.

    `bottom` (the paper's choice; top and interleaved were worse): layers 0..n-1. `top`: the last
    n layers. `every_kth`: the top layer of each module (1, 3, 5, … for 12→6), the layer whose
    output the module's output is.
    """
    depth, n = sum(len(g) for g in groups), len(groups)
    if init == "bottom":
        return list(range(n))
    if init == "top":
        return list(range(depth - n, depth))
    if init == "every_kth":
        return [group[-1] for group in groups]
    raise ValueError(f"unknown successor init {init!r}")


# ----------------------------------------------------------------------------------------------
# the hybrid model
# ----------------------------------------------------------------------------------------------


class ReplacingModel(nn.Module):
    """Student (embeddings and head frozen, successors trainable) + frozen predecessor modules.

    `student` is a complete n-layer task model sharing nothing with the teacher: it is what is
    evaluated and exported, and the hybrid's embeddings and head are its (frozen) ones.
    """

    def __init__(self, teacher: PreTrainedModel, groups: Sequence[Sequence[int]], successor_layers: Sequence[int]):
        super().__init__()
        if len(groups) != len(successor_layers):
            raise ValueError(f"{len(groups)} modules but {len(successor_layers)} successor layers")
        self.groups = tuple(tuple(g) for g in groups)
        self.student = freeze(student_from_layers(teacher, successor_layers))
        for p in self.successors.parameters():
            p.requires_grad_(True)
        teacher_layers = encoder_layers(teacher)
        self.predecessors = freeze(
            nn.ModuleList(nn.ModuleList(copy.deepcopy(teacher_layers[i]) for i in group) for group in self.groups)
        )

    @property
    def successors(self) -> nn.ModuleList:
        return encoder_layers(self.student)

    @property
    def num_modules(self) -> int:
        return len(self.groups)

    def embed(self, inputs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
        return embed(self.student, inputs)

    def run_successor(self, index: int, hidden: torch.Tensor, mask: Any) -> torch.Tensor:
        return self.successors[index](hidden, mask)

    def run_predecessor(self, index: int, hidden: torch.Tensor, mask: Any) -> torch.Tensor:
        group = cast(nn.ModuleList, self.predecessors[index])  # ModuleList indexing is typed as a plain Module
        return run_layers(group, hidden, mask)

    def classify(self, last_hidden: torch.Tensor) -> torch.Tensor:
        return classify(self.student, last_hidden)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        use_successor: Sequence[bool] | None = None,
    ) -> torch.Tensor:
        """Logits of the hybrid where module i runs its successor if use_successor[i], else its
        predecessor (None: every successor, the pure student). The branch not chosen is never
        computed, which is where Theseus' speed comes from."""
        choice = [True] * self.num_modules if use_successor is None else list(use_successor)
        if len(choice) != self.num_modules:
            raise ValueError(f"use_successor has {len(choice)} entries for {self.num_modules} modules")
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        hidden, mask = self.embed({k: v for k, v in given.items() if v is not None})  # embed reads a missing key as None
        for index, successor in enumerate(choice):
            run = self.run_successor if successor else self.run_predecessor
            hidden = run(index, hidden, mask)
        return self.classify(hidden)


def zero_gradient_anchor(parameters: Iterable[nn.Parameter]) -> torch.Tensor:
    """0·Σθ: connects parameters to the loss with a zero gradient.

    Theseus needs it for modules whose predecessor ran. A batch that ran no successor has no
    trainable parameter in its graph, and backward (the loop's, and every DDP rank's gradient
    all-reduce) needs one. Anchoring every unused successor gives each a zero gradient, which is
    what the official code's `zero_grad()` (zeroing, not freeing, gradients) gave them too: every
    successor takes every optimizer step.
    """
    terms = [p.sum() for p in parameters]
    if not terms:
        raise ValueError("nothing to anchor")
    return torch.stack(terms).sum() * 0.0


# ----------------------------------------------------------------------------------------------
# the shared method
# ----------------------------------------------------------------------------------------------


def resolve_modules(params: ReplacingParams, teacher_depth: int, defaults: StudentDefaults) -> tuple[list[list[int]], list[int]]:
    """(predecessor groups, successor init layers) for a teacher of `teacher_depth` layers.

    The number of modules follows drydock's usual precedence (the method's layers/num_layers/
    split, then the spec's student section, else half the teacher); with init `bottom`, explicit
    layers (the method's, else the spec's `student.layers`) are honoured as given.
    """
    requested = params.num_layers or (len(params.split) if params.split is not None else None)
    chosen = student_layer_indices(teacher_depth, requested, params.layers, defaults.num_layers, defaults.layers)
    groups = module_groups(teacher_depth, len(chosen), params.split)
    if params.init != "bottom":
        chosen = successor_init_layers(groups, params.init)
    return groups, chosen


class ModuleReplacingMethod(Method):
    """Hooks Theseus and DCR share: only the successor layers train; the pure student is what
    is evaluated (valid at any step) and exported."""

    params: ReplacingParams
    model: ReplacingModel

    def build(self) -> nn.Module:
        teacher = self.ctx.teacher
        if teacher is None:
            raise ValueError(f"{self.name} replaces the fine-tuned teacher's modules and needs that teacher")
        groups, layers = resolve_modules(self.params, num_layers(teacher), self.ctx.student)
        self.model = ReplacingModel(teacher, groups, layers).train()
        return self.model

    def param_groups(self, phase: Phase) -> list[ParamGroup]:
        lr = self.params.learning_rate or self.ctx.learning_rate
        return decay_groups("successors", self.model.successors.named_parameters(), lr, self.ctx.weight_decay)

    def eval_model(self) -> nn.Module:
        return self.model.student

    def export(self) -> PreTrainedModel:
        """The student itself: a stock n-layer task model (teacher embeddings and head,
        successor layers) that plain transformers loads."""
        return copy.deepcopy(self.model.student).eval()

    def state_dict(self) -> dict[str, Any]:
        """Only the student: the predecessors are frozen copies `build` recreates."""
        return {"student": {k: v.detach().clone() for k, v in self.model.student.state_dict().items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.student.load_state_dict(state["student"])
