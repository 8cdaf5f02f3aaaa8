"""CoFi's masked BERT forward, and the surgery that turns 0/1 masks into a smaller model.

The masked forward runs a stock `BertForSequenceClassification` with masks at five
granularities (`StructureMasks`). It calls the stock modules' Linear, LayerNorm and dropout
pieces and places the masks where CoFi's official `models/modeling_bert.py` does:

- embeddings: (word + position + token type) · z_hidden → LayerNorm over the kept hidden
  dimensions → dropout → · z_hidden;
- attention: per-head context · z_head → output projection · z_mha → · z_hidden → dropout →
  LayerNorm(· + residual) over the kept hidden dimensions → · z_hidden;
- feed-forward: activation(intermediate) · z_intermediate → output projection · z_ffn →
  · z_hidden → dropout → LayerNorm(· + residual) over the kept dimensions → · z_hidden;
- a sub-layer whose gate is 0 is skipped: its input passes through without the LayerNorm, which
  is what removing it from the network means.

Hidden-dimension pruning and LayerNorm: normalising the kept dimensions only is not the same
function as normalising all dimensions of a masked vector (the zeros would enter the mean and
variance). The official code normalises over the dimensions whose hidden mask is non-zero
(`CoFiLayerNorm`) and its export slices the LayerNorm weights to the kept dimensions; drydock
does both, so the masked model under deterministic 0/1 masks and the pruned export compute the
same function (equal within float rounding).

Where drydock differs: an attention sub-layer whose heads are all masked counts as removed even
if its MHA mask is not 0 (likewise an FFN with no intermediate dimension left). The official
forward would still add the output projection's bias and apply the LayerNorm there while its
export deletes the sub-layer; treating both alike keeps training, evaluation and export one
function.

`prune` then copies the surviving rows and columns into a `PrunedBertForSequenceClassification`
(`methods/_pruned_bert.py`): fewer heads give smaller Q/K/V/output matrices, fewer intermediate
dimensions smaller FFN matrices, fewer hidden dimensions smaller embeddings, Linear inputs and
outputs and LayerNorms; removed sub-layers and layers with nothing left disappear.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertForSequenceClassification, PreTrainedModel
from transformers.models.bert.modeling_bert import BertAttention, BertLayer

from methods._l0 import StructureMasks
from methods._pruned_bert import (
    PrunedBertConfig,
    PrunedBertForSequenceClassification,
    key_padding_mask,
)


def check_supported(model: PreTrainedModel) -> None:
    """CoFi's surgery knows BERT's module layout (absolute positions, pooler, classifier)."""
    if not isinstance(model, BertForSequenceClassification):
        raise TypeError(f"cofi prunes BertForSequenceClassification models, not {type(model).__name__}")
    kind = getattr(model.config, "position_embedding_type", "absolute")
    if kind != "absolute":
        raise ValueError(f"cofi supports absolute position embeddings only (the teacher uses {kind!r})")


# ----------------------------------------------------------------------------------------------
# the masked forward
# ----------------------------------------------------------------------------------------------


def masked_layer_norm(x: torch.Tensor, keep: torch.Tensor, layer_norm: nn.LayerNorm) -> torch.Tensor:
    """LayerNorm over the dimensions where `keep` is True; the other dimensions come out 0.

    Statistics are weighted sums, not index selection, so no host synchronisation is needed.
    With no dimension kept the result is 0 rather than NaN."""
    dtype = x.dtype
    x = x.float()
    weights = keep.to(torch.float32)
    count = weights.sum().clamp(min=1.0)
    mean = (x * weights).sum(-1, keepdim=True) / count
    centred = (x - mean) * weights
    variance = (centred * centred).sum(-1, keepdim=True) / count
    normed = centred * torch.rsqrt(variance + layer_norm.eps)
    return ((normed * layer_norm.weight.float() + layer_norm.bias.float()) * weights).to(dtype)


def sublayer_gates(masks: StructureMasks) -> tuple[torch.Tensor, torch.Tensor]:
    """Effective MHA and FFN gates per layer: 0 as well when no head / dimension is left."""
    attention = masks.mha * (masks.heads != 0).any(-1)
    feed_forward = masks.ffn * (masks.intermediate != 0).any(-1)
    return attention, feed_forward


def active_layers(masks: StructureMasks) -> torch.Tensor:
    """[layers] booleans: the layer still computes something (either sub-layer survives)."""
    attention, feed_forward = sublayer_gates(masks)
    return (attention != 0) | (feed_forward != 0)


def _masked_attention(
    attention: BertAttention,
    hidden: torch.Tensor,
    key_mask: torch.Tensor | None,
    head_mask: torch.Tensor,
    gate: torch.Tensor,
    hidden_mask: torch.Tensor,
    keep: torch.Tensor,
) -> torch.Tensor:
    heads = attention.self
    batch, length, _ = hidden.shape
    num_heads, head_size = heads.num_attention_heads, heads.attention_head_size
    shape = (batch, length, num_heads, head_size)
    query = heads.query(hidden).view(shape).transpose(1, 2)
    key = heads.key(hidden).view(shape).transpose(1, 2)
    value = heads.value(hidden).view(shape).transpose(1, 2)
    context = F.scaled_dot_product_attention(
        query, key, value, attn_mask=key_mask, dropout_p=heads.dropout.p if heads.training else 0.0
    )
    context = (context * head_mask.view(1, num_heads, 1, 1)).transpose(1, 2).reshape(batch, length, -1)
    out = attention.output.dropout(attention.output.dense(context) * gate * hidden_mask)
    normed = masked_layer_norm(out + hidden, keep, attention.output.LayerNorm) * hidden_mask
    return torch.where(gate == 0, hidden, normed)


def _masked_feed_forward(
    layer: BertLayer,
    hidden: torch.Tensor,
    intermediate_mask: torch.Tensor,
    gate: torch.Tensor,
    hidden_mask: torch.Tensor,
    keep: torch.Tensor,
) -> torch.Tensor:
    intermediate = layer.intermediate(hidden) * intermediate_mask
    out = layer.output.dropout(layer.output.dense(intermediate) * gate * hidden_mask)
    normed = masked_layer_norm(out + hidden, keep, layer.output.LayerNorm) * hidden_mask
    return torch.where(gate == 0, hidden, normed)


def masked_forward(
    model: BertForSequenceClassification, batch: dict[str, torch.Tensor], masks: StructureMasks
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Hidden states (embeddings output, then every layer's) and logits under `masks`."""
    base = model.bert
    embeddings = base.embeddings
    input_ids = batch["input_ids"]
    token_type_ids = batch.get("token_type_ids")
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    positions = embeddings.position_ids[:, : input_ids.shape[1]]
    hidden_mask = masks.hidden
    keep = hidden_mask != 0
    hidden = embeddings.word_embeddings(input_ids) + embeddings.token_type_embeddings(token_type_ids)
    hidden = (hidden + embeddings.position_embeddings(positions)) * hidden_mask
    hidden = embeddings.dropout(masked_layer_norm(hidden, keep, embeddings.LayerNorm)) * hidden_mask
    key_mask = key_padding_mask(batch.get("attention_mask"))
    attention_gates, feed_forward_gates = sublayer_gates(masks)
    states = [hidden]
    for index, layer in enumerate(base.encoder.layer):
        hidden = _masked_attention(
            layer.attention, hidden, key_mask, masks.heads[index], attention_gates[index], hidden_mask, keep
        )
        hidden = _masked_feed_forward(
            layer, hidden, masks.intermediate[index], feed_forward_gates[index], hidden_mask, keep
        )
        states.append(hidden)
    assert base.pooler is not None  # BertForSequenceClassification builds its BertModel with the pooler
    logits = model.classifier(model.dropout(base.pooler(hidden)))
    return states, logits


# ----------------------------------------------------------------------------------------------
# surgery
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeptUnits:
    """What survives 0/1 masks: indices into the original model, layers with nothing left dropped."""

    hidden: list[int]
    layers: list[int]  # original indices of the layers that keep a sub-layer
    heads: list[list[int]]  # per kept layer
    intermediate: list[list[int]]  # per kept layer


def _nonzero(values: torch.Tensor) -> list[int]:
    return torch.nonzero(values.detach().cpu() != 0).flatten().tolist()


def kept_units(masks: StructureMasks) -> KeptUnits:
    attention, feed_forward = (gate.detach().cpu() for gate in sublayer_gates(masks))
    layers, heads, intermediate = [], [], []
    for index in range(masks.heads.shape[0]):
        layer_heads = _nonzero(masks.heads[index]) if attention[index] != 0 else []
        layer_dims = _nonzero(masks.intermediate[index]) if feed_forward[index] != 0 else []
        if layer_heads or layer_dims:
            layers.append(index)
            heads.append(layer_heads)
            intermediate.append(layer_dims)
    return KeptUnits(_nonzero(masks.hidden), layers, heads, intermediate)


def pruned_config(
    source: BertConfig, hidden_size: int, layer_heads: list[int], layer_intermediate: list[int]
) -> PrunedBertConfig:
    """The exported architecture: the source's settings with per-layer widths."""
    # PretrainedConfig's __post_init__ always sets the label maps (two labels by default)
    assert source.id2label is not None and source.label2id is not None
    return PrunedBertConfig(
        vocab_size=source.vocab_size,
        hidden_size=hidden_size,
        pooler_size=source.hidden_size,
        attention_head_size=source.hidden_size // source.num_attention_heads,
        layer_heads=list(layer_heads),
        layer_intermediate=list(layer_intermediate),
        max_position_embeddings=source.max_position_embeddings,
        type_vocab_size=source.type_vocab_size,
        hidden_act=source.hidden_act,
        hidden_dropout_prob=source.hidden_dropout_prob,
        attention_probs_dropout_prob=source.attention_probs_dropout_prob,
        classifier_dropout=getattr(source, "classifier_dropout", None),
        layer_norm_eps=source.layer_norm_eps,
        initializer_range=source.initializer_range,
        pad_token_id=source.pad_token_id if source.pad_token_id is not None else 0,
        id2label=dict(source.id2label),
        label2id=dict(source.label2id),
        problem_type=source.problem_type,
    )


def _copy_linear(target: nn.Linear, source: nn.Linear, rows: torch.Tensor | None, columns: torch.Tensor | None) -> None:
    weight: torch.Tensor = source.weight
    bias: torch.Tensor = source.bias
    if rows is not None:
        weight, bias = weight[rows], bias[rows]
    if columns is not None:
        weight = weight[:, columns]
    target.weight.copy_(weight)
    target.bias.copy_(bias)


def _copy_layer_norm(target: nn.LayerNorm, source: nn.LayerNorm, index: torch.Tensor) -> None:
    target.weight.copy_(source.weight[index])
    target.bias.copy_(source.bias[index])


@torch.no_grad()
def prune(model: BertForSequenceClassification, masks: StructureMasks) -> PrunedBertForSequenceClassification:
    """A physically smaller copy of `model` keeping what the 0/1 `masks` keep."""
    check_supported(model)
    kept = kept_units(masks)
    source_config = model.config
    head_size = source_config.hidden_size // source_config.num_attention_heads
    config = pruned_config(
        source_config, len(kept.hidden), [len(h) for h in kept.heads], [len(i) for i in kept.intermediate]
    )
    device = model.classifier.weight.device
    # transformers declares PreTrainedModel.to with functools.wraps(nn.Module.to): mypy sees the unbound signature
    pruned = PrunedBertForSequenceClassification(config).to(device=device, dtype=model.classifier.weight.dtype)  # type: ignore[call-arg]
    hidden = torch.tensor(kept.hidden, dtype=torch.long, device=device)

    source, target = model.bert.embeddings, pruned.bert.embeddings
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        getattr(target, name).weight.copy_(getattr(source, name).weight[:, hidden])
    _copy_layer_norm(target.LayerNorm, source.LayerNorm, hidden)

    for target_layer, index, heads, dims in zip(pruned.bert.encoder.layer, kept.layers, kept.heads, kept.intermediate):
        source_layer = model.bert.encoder.layer[index]
        if heads:
            rows = torch.tensor([h * head_size + i for h in heads for i in range(head_size)], device=device)
            for name in ("query", "key", "value"):
                _copy_linear(getattr(target_layer.attention.self, name), getattr(source_layer.attention.self, name), rows, hidden)
            _copy_linear(target_layer.attention.output.dense, source_layer.attention.output.dense, hidden, rows)
            _copy_layer_norm(target_layer.attention.output.LayerNorm, source_layer.attention.output.LayerNorm, hidden)
        if dims:
            columns = torch.tensor(dims, dtype=torch.long, device=device)
            _copy_linear(target_layer.intermediate.dense, source_layer.intermediate.dense, columns, hidden)
            _copy_linear(target_layer.output.dense, source_layer.output.dense, hidden, columns)
            _copy_layer_norm(target_layer.output.LayerNorm, source_layer.output.LayerNorm, hidden)

    assert pruned.bert.pooler is not None and model.bert.pooler is not None  # both built with the pooler
    _copy_linear(pruned.bert.pooler.dense, model.bert.pooler.dense, None, hidden)
    _copy_linear(pruned.classifier, model.classifier, None, None)
    return pruned


def pruned_parameter_count(config: BertConfig, masks: StructureMasks) -> int:
    """Every parameter `prune(model, masks)` keeps, counted from the masks alone."""
    kept = kept_units(masks)
    hidden = len(kept.hidden)
    head_size = config.hidden_size // config.num_attention_heads
    count = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * hidden + 2 * hidden
    for heads, dims in zip(kept.heads, kept.intermediate):
        width = len(heads) * head_size
        if width:
            count += 3 * (hidden * width + width) + (width * hidden + hidden) + 2 * hidden
        if dims:
            count += (hidden * len(dims) + len(dims)) + (len(dims) * hidden + hidden) + 2 * hidden
    count += hidden * config.hidden_size + config.hidden_size  # pooler: pruned input, full output
    labels = config.num_labels
    assert labels is not None  # set with the label maps by PretrainedConfig's __post_init__
    count += config.hidden_size * labels + labels
    return count


def pruned_sparsity(source: BertConfig, pruned: PrunedBertConfig) -> float:
    """The pruned encoder's sparsity under the paper's bookkeeping (embeddings excluded)."""
    head_size, hidden = pruned.attention_head_size, pruned.hidden_size
    remaining = hidden * sum(
        4 * head_size * heads + 2 * dims for heads, dims in zip(pruned.layer_heads, pruned.layer_intermediate)
    )
    full = source.num_hidden_layers * source.hidden_size * (4 * source.hidden_size + 2 * source.intermediate_size)
    return 1 - remaining / full
