"""CoFi's masked forward and physical pruning (methods/_surgery.py, methods/_pruned_bert.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from methods._l0 import StructureMasks, expected_sparsity
from methods._surgery import (
    active_layers,
    masked_forward,
    masked_layer_norm,
    prune,
    pruned_parameter_count,
    pruned_sparsity,
    sublayer_gates,
)
from pipeline.training.export import count_parameters
from tests.conftest import make_batch, make_tiny_bert

INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")



def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    return {k: v for k, v in make_batch(batch_size=4, seq_len=12, seed=seed).items() if k in INPUT_KEYS}


def _ones(layers: int = 4) -> StructureMasks:
    return StructureMasks(torch.ones(32), torch.ones(layers, 4), torch.ones(layers), torch.ones(layers, 64), torch.ones(layers))


def _mixed_masks() -> StructureMasks:
    """Random 0/1 masks with every special case: layer 0 keeps one head and some FFN dims,
    layer 1 loses its attention (MHA mask 0), layer 2 its FFN (FFN mask 0), layer 3 loses both
    (the layer disappears), and a third of the hidden dimensions are pruned."""
    g = torch.Generator().manual_seed(7)
    hidden = (torch.rand(32, generator=g) > 0.33).float()
    heads = (torch.rand(4, 4, generator=g) > 0.3).float()
    heads[0] = torch.tensor([0.0, 0.0, 1.0, 0.0])
    heads[2, 0] = 1.0
    intermediate = (torch.rand(4, 64, generator=g) > 0.5).float()
    mha = torch.tensor([1.0, 0.0, 1.0, 0.0])
    ffn = torch.tensor([1.0, 1.0, 0.0, 0.0])
    return StructureMasks(hidden, heads, mha, intermediate, ffn)


def test_masked_layer_norm_normalises_the_kept_dimensions_only():
    torch.manual_seed(0)
    layer_norm = torch.nn.LayerNorm(6, eps=1e-12)
    with torch.no_grad():
        layer_norm.weight.uniform_(0.5, 1.5)
        layer_norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 3, 6)
    keep = torch.tensor([True, False, True, True, False, True])
    out = masked_layer_norm(x, keep, layer_norm)
    kept = keep.nonzero().flatten()
    expected = F.layer_norm(x[..., kept], (4,), layer_norm.weight[kept], layer_norm.bias[kept], 1e-12)
    torch.testing.assert_close(out[..., kept], expected)
    assert torch.all(out[..., ~keep] == 0)
    torch.testing.assert_close(masked_layer_norm(x, torch.ones(6, dtype=torch.bool), layer_norm), layer_norm(x))
    assert torch.all(masked_layer_norm(x, torch.zeros(6, dtype=torch.bool), layer_norm) == 0)  # no NaN


def test_masked_forward_with_all_masks_on_is_the_stock_bert():
    model = make_tiny_bert()
    batch = _inputs()
    with torch.no_grad():
        states, logits = masked_forward(model, batch, _ones())
        reference = model(**batch, output_hidden_states=True)
    torch.testing.assert_close(logits, reference.logits, atol=1e-5, rtol=1e-5)
    final = model.bert(**batch).last_hidden_state
    torch.testing.assert_close(states[-1], final, atol=1e-5, rtol=1e-5)


def test_sublayer_gates_treat_a_headless_attention_as_removed():
    masks = _ones(2)
    masks.heads[0] = 0.0  # MHA mask still 1
    masks.intermediate[1] = 0.0
    attention, feed_forward = sublayer_gates(masks)
    assert attention.tolist() == [0.0, 1.0] and feed_forward.tolist() == [1.0, 0.0]
    masks.mha[1] = 0.0
    masks.ffn[0] = 0.0
    assert active_layers(masks).tolist() == [False, False]


def test_removed_sublayer_passes_its_input_through_and_gets_no_gradient():
    model = make_tiny_bert().train()
    for module in model.modules():  # determinism without touching the masks' role
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    masks = _ones()
    masks.mha[1] = 0.0
    masks.ffn[1] = 0.0
    states, logits = masked_forward(model, _inputs(), masks)
    torch.testing.assert_close(states[2], states[1])  # layer 1 is the identity
    logits.sum().backward()
    layer = model.bert.encoder.layer
    assert layer[1].attention.self.query.weight.grad is None or torch.all(layer[1].attention.self.query.weight.grad == 0)
    assert torch.all(layer[1].output.dense.weight.grad == 0)
    assert layer[2].output.dense.weight.grad.abs().sum() > 0


def test_soft_masks_receive_gradients():
    model = make_tiny_bert()
    masks = _ones().map(lambda t: (t * 0.7).requires_grad_())
    _, logits = masked_forward(model, _inputs(), masks)
    logits[:, 1].sum().backward()
    for name in ("hidden", "heads", "mha", "intermediate", "ffn"):
        assert getattr(masks, name).grad.abs().sum() > 0, name


def test_export_equals_the_masked_model_for_mixed_binary_masks():
    model = make_tiny_bert()
    with torch.no_grad():  # larger classifier weights so the logits are not all ~0
        model.classifier.weight.mul_(50)
    masks = _mixed_masks()
    batch = _inputs(seed=3)
    pruned = prune(model, masks).eval()
    with torch.no_grad():
        states, logits = masked_forward(model, batch, masks)
        output = pruned(**batch, output_hidden_states=True)
    kept = masks.hidden.nonzero().flatten()
    torch.testing.assert_close(output.hidden_states[-1], states[-1][..., kept], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output.logits, logits, atol=1e-5, rtol=1e-5)
    assert logits.abs().max() > 0.1

    # physically smaller, shaped by the masks
    config = pruned.config
    assert config.hidden_size == len(kept)
    assert config.layer_heads == [1, 0, int(masks.heads[2].sum())]  # layer 3 kept nothing: dropped
    assert config.layer_intermediate == [int(masks.intermediate[0].sum()), int(masks.intermediate[1].sum()), 0]
    layers = pruned.bert.encoder.layer
    assert layers[0].attention.self.query.weight.shape == (8, len(kept))  # one head of 8 dims
    assert layers[1].attention is None and layers[2].intermediate is None and layers[2].output is None
    assert pruned.bert.embeddings.word_embeddings.weight.shape == (100, len(kept))
    assert pruned.bert.embeddings.LayerNorm.weight.shape == (len(kept),)
    assert pruned.bert.pooler.dense.weight.shape == (32, len(kept))

    assert count_parameters(pruned)[0] == pruned_parameter_count(model.config, masks)
    assert count_parameters(pruned)[0] < count_parameters(model)[0]
    assert pruned_sparsity(model.config, config) == pytest.approx(float(expected_sparsity(masks, head_size=8)))


def test_all_ones_masks_export_the_whole_model():
    model = make_tiny_bert()
    pruned = prune(model, _ones()).eval()
    assert count_parameters(pruned) == count_parameters(model)
    assert pruned_sparsity(model.config, pruned.config) == 0.0
    batch = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(pruned(**batch).logits, model(**batch).logits, atol=1e-5, rtol=1e-5)

