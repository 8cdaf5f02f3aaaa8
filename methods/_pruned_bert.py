"""A BERT whose layers each keep their own number of heads and feed-forward dimensions.

This is the architecture CoFi exports after physically pruning a BERT. A stock `BertConfig`
cannot describe it (one head count and one intermediate size for all layers, and transformers 5
no longer re-applies `pruned_heads` on load), so the exported folder ships this module: a config
class and a model class registered for the auto classes. `save_pretrained` writes `config.json`
with an `auto_map` and a copy of this file, and a consumer without drydock loads the folder with
`AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)`.

The module must stay self-contained: it imports only torch and transformers.

Shapes, all in `PrunedBertConfig`:
- `hidden_size`: the surviving hidden dimensions. CoFi prunes one hidden mask shared by the
  embeddings and every layer, so the whole residual stream has this width.
- `attention_head_size`: the original head width; layer i keeps `layer_heads[i]` heads. With 0
  heads the attention sub-layer is gone: its input passes through unchanged, without LayerNorm.
- `layer_intermediate[i]`: the surviving feed-forward dimensions of layer i; 0 removes the
  feed-forward sub-layer the same way.
- `pooler_size`: the pooler's output width. CoFi prunes the pooler's input dimensions only (its
  official `prune_model_with_z` does the same), so the pooler and classifier keep the original
  width and the classifier is the fine-tuned one.

Every LayerNorm normalises over the surviving hidden dimensions only, with the matching slices of
its original weight and bias. This matches CoFi's masked model exactly, where LayerNorm
normalises over the dimensions whose hidden mask is non-zero.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import SequenceClassifierOutput


class PrunedBertConfig(PretrainedConfig):
    model_type = "drydock_pruned_bert"

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 768,
        pooler_size: int = 768,
        attention_head_size: int = 64,
        layer_heads: list[int] | None = None,
        layer_intermediate: list[int] | None = None,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        classifier_dropout: float | None = None,
        layer_norm_eps: float = 1e-12,
        initializer_range: float = 0.02,
        pad_token_id: int = 0,
        **kwargs,
    ):
        # PretrainedConfig's __init__ takes keywords beyond its dataclass fields (its wrap_init_to_accept_kwargs);
        # mypy sees only the dataclass fields, and pad_token_id is no longer one of them
        super().__init__(pad_token_id=pad_token_id, **kwargs)  # type: ignore[call-arg]
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.pooler_size = pooler_size
        self.attention_head_size = attention_head_size
        self.layer_heads = list(layer_heads or [])
        self.layer_intermediate = list(layer_intermediate or [])
        if len(self.layer_heads) != len(self.layer_intermediate):
            raise ValueError("layer_heads and layer_intermediate must list the same layers")
        self.num_hidden_layers = len(self.layer_heads)
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.classifier_dropout = classifier_dropout
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range


class PrunedBertEmbeddings(nn.Module):
    def __init__(self, config: PrunedBertConfig):
        super().__init__()
        # any module after set_input_embeddings
        self.word_embeddings: nn.Module = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, position_ids: torch.Tensor | None
    ) -> torch.Tensor:
        seq_length = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(seq_length, device=input_ids.device).unsqueeze(0)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class PrunedBertSelfAttention(nn.Module):
    def __init__(self, config: PrunedBertConfig, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_size = config.attention_head_size
        width = num_heads * self.head_size
        self.query = nn.Linear(config.hidden_size, width)
        self.key = nn.Linear(config.hidden_size, width)
        self.value = nn.Linear(config.hidden_size, width)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, _ = hidden.shape
        shape = (batch, length, self.num_heads, self.head_size)
        query = self.query(hidden).view(shape).transpose(1, 2)
        key = self.key(hidden).view(shape).transpose(1, 2)
        value = self.value(hidden).view(shape).transpose(1, 2)
        context = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=self.dropout_p if self.training else 0.0
        )
        return context.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_size)


class PrunedBertSelfOutput(nn.Module):
    def __init__(self, config: PrunedBertConfig, num_heads: int):
        super().__init__()
        self.dense = nn.Linear(num_heads * config.attention_head_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, context: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(context)) + residual)


class PrunedBertAttention(nn.Module):
    def __init__(self, config: PrunedBertConfig, num_heads: int):
        super().__init__()
        self.self = PrunedBertSelfAttention(config, num_heads)
        self.output = PrunedBertSelfOutput(config, num_heads)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(hidden, attention_mask), hidden)


class PrunedBertIntermediate(nn.Module):
    def __init__(self, config: PrunedBertConfig, size: int):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden))


class PrunedBertOutput(nn.Module):
    def __init__(self, config: PrunedBertConfig, size: int):
        super().__init__()
        self.dense = nn.Linear(size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, intermediate: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(intermediate)) + residual)


class PrunedBertLayer(nn.Module):
    """One layer; a sub-layer pruned away entirely is None and its input passes through."""

    def __init__(self, config: PrunedBertConfig, num_heads: int, intermediate_size: int):
        super().__init__()
        self.attention = PrunedBertAttention(config, num_heads) if num_heads > 0 else None
        self.intermediate = PrunedBertIntermediate(config, intermediate_size) if intermediate_size > 0 else None
        self.output = PrunedBertOutput(config, intermediate_size) if intermediate_size > 0 else None

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.attention is not None:
            hidden = self.attention(hidden, attention_mask)
        if self.intermediate is not None:
            assert self.output is not None  # built together with intermediate
            hidden = self.output(self.intermediate(hidden), hidden)
        return hidden


class PrunedBertEncoder(nn.Module):
    def __init__(self, config: PrunedBertConfig):
        super().__init__()
        self.layer = nn.ModuleList(
            PrunedBertLayer(config, heads, size) for heads, size in zip(config.layer_heads, config.layer_intermediate)
        )


class PrunedBertPooler(nn.Module):
    def __init__(self, config: PrunedBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.pooler_size)
        self.activation = nn.Tanh()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden[:, 0]))


class PrunedBertModel(nn.Module):
    def __init__(self, config: PrunedBertConfig):
        super().__init__()
        self.embeddings = PrunedBertEmbeddings(config)
        self.encoder = PrunedBertEncoder(config)
        self.pooler = PrunedBertPooler(config)


def key_padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """[batch, 1, 1, length] booleans, True where a key may be attended (scaled_dot_product_attention)."""
    if attention_mask is None:
        return None
    return attention_mask.bool()[:, None, None, :]


class PrunedBertForSequenceClassification(PreTrainedModel):
    config_class = PrunedBertConfig
    base_model_prefix = "bert"

    def __init__(self, config: PrunedBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = PrunedBertModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        assert config.num_labels is not None  # set with the label maps by PretrainedConfig's __post_init__
        self.classifier = nn.Linear(config.pooler_size, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.bert.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.bert.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        hidden = self.bert.embeddings(input_ids, token_type_ids, position_ids)
        mask = key_padding_mask(attention_mask)
        states = [hidden]
        for layer in self.bert.encoder.layer:
            hidden = layer(hidden, mask)
            states.append(hidden)
        logits = self.classifier(self.dropout(self.bert.pooler(hidden)))
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1), labels.float())
            else:
                loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=tuple(states) if output_hidden_states else None
        )


PrunedBertConfig.register_for_auto_class()
PrunedBertForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
