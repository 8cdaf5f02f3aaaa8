"""BERT plumbing shared by methods: run the encoder piece by piece, build smaller students.

Methods that mix teacher and student layers (Theseus, DCR), read intermediate states (PKD,
CoFi) or attention internals (MiniLM) need the encoder as separate steps: embeddings → layers →
pooler/classifier. transformers 5 no longer lets a layer return attentions through the stock
encoder loop, so these helpers call the modules directly; a layer is `layer(hidden, mask)`.

Works for `BertForSequenceClassification` and lookalikes (RoBERTa-style models keep the same
`base_model.embeddings`, `base_model.encoder.layer` layout but put the head elsewhere, so the
head helper handles both shapes).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn
from transformers import BertForSequenceClassification, PreTrainedModel
from transformers.masking_utils import create_bidirectional_mask


def backbone(model: PreTrainedModel) -> Any:
    """The encoder model inside a task model (`model.bert` for BERT). Typed Any: its submodules
    (`embeddings`, `encoder.layer`, `pooler`) are looked up by name, which nn.Module types as
    `Tensor | Module`."""
    return model.base_model


def encoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    return cast(nn.ModuleList, backbone(model).encoder.layer)


def num_layers(model: PreTrainedModel) -> int:
    return len(encoder_layers(model))


def embed(model: PreTrainedModel, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
    """Embeddings output and the attention mask in the form the layers expect."""
    base = backbone(model)
    hidden = base.embeddings(input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))
    mask = layer_mask(model, batch.get("attention_mask"), hidden)
    return hidden, mask


def layer_mask(model: PreTrainedModel, attention_mask: torch.Tensor | None, hidden: torch.Tensor) -> Any:
    return create_bidirectional_mask(config=model.config, inputs_embeds=hidden, attention_mask=attention_mask)


def run_layers(layers: Iterable[nn.Module], hidden: torch.Tensor, mask: Any) -> torch.Tensor:
    for layer in layers:
        hidden = layer(hidden, mask)
    return hidden


def classify(model: PreTrainedModel, last_hidden: torch.Tensor) -> torch.Tensor:
    """Pooler (when the model has one) + dropout + classifier: the task head on the last layer."""
    base = backbone(model)
    pooler = getattr(base, "pooler", None)
    # looked up by name: nn.Module types a submodule attribute as `Tensor | Module`
    classifier = cast(nn.Module, model.classifier)
    if isinstance(model, BertForSequenceClassification) or hasattr(model, "dropout"):
        pooled = pooler(last_hidden) if pooler is not None else last_hidden[:, 0]
        return classifier(cast(nn.Module, model.dropout)(pooled))
    return classifier(last_hidden)  # RoBERTa-style heads take the sequence


def forward_hidden_states(model: PreTrainedModel, batch: Mapping[str, torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """All hidden states (embeddings output first, then each layer's) and the logits."""
    hidden, mask = embed(model, batch)
    states = [hidden]
    for layer in encoder_layers(model):
        hidden = layer(hidden, mask)
        states.append(hidden)
    return states, classify(model, hidden)


# ----------------------------------------------------------------------------------------------
# students
# ----------------------------------------------------------------------------------------------


def bottom_layers(teacher_layers: int, k: int) -> list[int]:
    return list(range(k))


def student_from_layers(teacher: PreTrainedModel, layers: Sequence[int]) -> PreTrainedModel:
    """A copy of `teacher` keeping only encoder layers `layers` (embeddings and head included).

    A real, smaller model: the dropped layers are gone from the module and the config, so the
    result saves and reloads as a stock transformers model with `num_hidden_layers = len(layers)`.
    """
    n = num_layers(teacher)
    bad = [i for i in layers if not 0 <= i < n]
    if bad or not layers:
        raise ValueError(f"student layers {list(layers)} must be indices in [0, {n})")
    student = copy.deepcopy(teacher)
    kept = [encoder_layers(student)[i] for i in layers]
    backbone(student).encoder.layer = nn.ModuleList(kept)
    student.config.num_hidden_layers = len(kept)
    for new_index, layer in enumerate(kept):  # keep cache/attention layer indices consistent
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                # a plain int attribute; nn.Module.__setattr__ is typed for tensors and modules only
                module.layer_idx = new_index  # type: ignore[assignment]
    for p in student.parameters():
        p.requires_grad_(True)
    return student


def student_from_config(
    teacher: PreTrainedModel,
    num_layers: int,
    hidden_size: int | None = None,
    num_heads: int | None = None,
    intermediate_size: int | None = None,
) -> PreTrainedModel:
    """A randomly initialised student of the teacher's family with a smaller shape."""
    cfg = copy.deepcopy(teacher.config)
    cfg.num_hidden_layers = num_layers
    cfg.hidden_size = hidden_size or cfg.hidden_size
    cfg.num_attention_heads = num_heads or cfg.num_attention_heads
    cfg.intermediate_size = intermediate_size or cfg.intermediate_size
    if cfg.hidden_size % cfg.num_attention_heads:
        raise ValueError(f"hidden size {cfg.hidden_size} is not divisible by {cfg.num_attention_heads} heads")
    return type(teacher)(cfg)


def student_layer_indices(
    teacher_layers: int,
    num_layers: int | None,
    layers: Sequence[int] | None,
    default_num_layers: int | None = None,
    default_layers: Sequence[int] | None = None,
) -> list[int]:
    """Which teacher layers a layer-dropping student keeps.

    Precedence: the method's explicit `layers`, its `num_layers` (bottom k), the spec's
    `student.layers`, the spec's `student.num_layers`, else half the teacher (rounded up).
    Bottom-k is the default because Theseus and PKD found it best and it keeps every baseline
    starting from the same weights.
    """
    if layers is not None:
        chosen = list(layers)
    elif num_layers is not None:
        chosen = bottom_layers(teacher_layers, num_layers)
    elif default_layers is not None:
        chosen = list(default_layers)
    else:
        chosen = bottom_layers(teacher_layers, default_num_layers or (teacher_layers + 1) // 2)
    if not chosen or len(chosen) > teacher_layers or any(not 0 <= i < teacher_layers for i in chosen):
        raise ValueError(
            f"student layers {chosen} do not fit a {teacher_layers}-layer teacher "
            f"(need 1..{teacher_layers} indices in [0, {teacher_layers}))"
        )
    if sorted(set(chosen)) != chosen:
        raise ValueError(f"student layers {chosen} must be strictly increasing")
    return chosen
