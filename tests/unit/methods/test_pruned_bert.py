"""The pruned BERT a CoFi student exports as: its attention mask, and the config that saves and
reloads its per-layer shapes."""

from __future__ import annotations

import torch

from methods._pruned_bert import PrunedBertConfig, key_padding_mask


def test_the_key_mask_lets_each_query_attend_to_the_real_tokens_only():
    mask = key_padding_mask(torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert mask is not None and mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    assert key_padding_mask(None) is None


def test_the_config_keeps_each_layers_own_shape_through_its_dict():
    config = PrunedBertConfig(hidden_size=32, attention_head_size=8, layer_heads=[4, 0, 2], layer_intermediate=[37, 0, 5])
    again = PrunedBertConfig.from_dict(config.to_dict())
    assert (again.layer_heads, again.layer_intermediate, again.hidden_size) == ([4, 0, 2], [37, 0, 5], 32)
    assert again.model_type == "drydock_pruned_bert"
