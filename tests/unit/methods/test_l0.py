"""Hard-concrete masks, expected sparsity and the Lagrangian controller (methods/_l0.py)."""

from __future__ import annotations

import pytest
import torch

from methods._l0 import (
    LOG_ALPHA_MAX,
    LOG_ALPHA_MIN,
    HardConcreteMasks,
    LagrangeMultipliers,
    StructureMasks,
    binarise,
    binarise_at,
    deterministic_mask,
    expected_sparsity,
    keep_probability,
    lagrangian_penalty,
    prunable_parameters,
    remaining_parameters,
    sample_hard_concrete,
    target_sparsity_at,
)


# P(z = 0) = sigmoid(β·log(1/11) − log α) and P(z = 1) = 1 − sigmoid(β·log(11) − log α), β = 2/3:
# the unstretched value must fall below 1/12 or above 11/12 of the stretched interval (−0.1, 1.1).
@pytest.mark.parametrize(
    ("log_alpha", "share_zeros", "share_ones"),
    [
        (0.0, 0.16818, 0.16818),  # sigmoid(−1.5986)
        (1.0, 0.06923, 0.35466),  # sigmoid(−2.5986), 1 − sigmoid(0.5986)
        (-2.0, 0.59902, 0.02663),  # sigmoid(0.4014), 1 − sigmoid(3.5986)
    ],
)
def test_hard_concrete_samples_lie_in_unit_interval_with_point_masses(log_alpha, share_zeros, share_ones):
    torch.manual_seed(0)
    samples = sample_hard_concrete(torch.full((200_000,), log_alpha))
    assert samples.min() >= 0 and samples.max() <= 1
    assert float((samples == 0).float().mean()) == pytest.approx(share_zeros, abs=0.004)
    assert float((samples == 1).float().mean()) == pytest.approx(share_ones, abs=0.004)
    # the closed-form keep probability is the sampler's share of non-zeros
    assert float(keep_probability(torch.tensor(log_alpha))) == pytest.approx(1 - share_zeros, abs=1e-4)


def test_samples_pass_gradient_only_strictly_inside_the_interval():
    torch.manual_seed(1)
    log_alpha = torch.zeros(2000, requires_grad=True)
    samples = sample_hard_concrete(log_alpha)
    samples.sum().backward()
    inside = (samples > 0) & (samples < 1)
    assert inside.any() and (~inside).any()
    assert torch.all(log_alpha.grad[inside] > 0)  # a larger log α moves the sample up
    assert torch.all(log_alpha.grad[~inside] == 0)  # clamped: exactly off or on


def test_deterministic_mask_zeroes_the_expected_count_lowest_first():
    # keep probabilities sigmoid(log α + 1.5986): 0.99005, 0.19758, 0.89075, 0.64534 → sum 2.7237,
    # expected zeros 1.276 → 1, the lowest log α (−3) goes
    row = torch.tensor([3.0, -3.0, 0.5, -1.0])
    assert deterministic_mask(row).tolist() == [1.0, 0.0, 1.0, 1.0]
    # all at the clamp floor: keep 0.0830 each, expected zeros 3.67 → 4; min_kept keeps one
    floor = torch.full((4,), LOG_ALPHA_MIN)
    assert deterministic_mask(floor).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert deterministic_mask(floor, min_kept=1).sum() == 1
    # groups are rows: each row of a matrix on its own
    assert deterministic_mask(torch.stack([row, floor])).tolist() == [[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
    # one-unit groups (layer masks): keep 0.998, 0.047, 0.832 → off only where keep < 1/2
    layer = torch.tensor([LOG_ALPHA_MAX, LOG_ALPHA_MIN, 0.0])
    assert deterministic_mask(layer.unsqueeze(-1)).squeeze(-1).tolist() == [1.0, 0.0, 1.0]


def test_initialisation_coarse_masks_on_intermediate_at_the_drop_rate():
    torch.manual_seed(0)
    masks = HardConcreteMasks(num_layers=3, num_heads=4, hidden_size=16, intermediate_size=32, droprate_init=0.5)
    keep = masks.keep_probabilities().map(torch.Tensor.detach)
    for name in ("hidden", "heads", "mha", "ffn"):
        assert torch.all(getattr(keep, name) > 0.999), name
    intermediate = masks.intermediate.detach()
    assert intermediate.mean().abs() < 0.01 and intermediate.std() < 0.02  # log((1 − d) / d) = 0
    assert float(keep.intermediate.mean()) == pytest.approx(0.832, abs=0.01)
    masks.clamp_()
    assert float(masks.hidden.detach().max()) == pytest.approx(LOG_ALPHA_MAX)
    assert deterministic_mask(masks.intermediate).mean() == pytest.approx(27 / 32)  # round(32·0.168) = 5 zeros


def _tiny_keep(value: float | None = None) -> StructureMasks:
    """Masks of a 2-layer model: 2 heads of size 2 (hidden 4), intermediate 3."""
    shapes = {"hidden": (4,), "heads": (2, 2), "mha": (2,), "intermediate": (2, 3), "ffn": (2,)}
    return StructureMasks(**{k: torch.full(s, value) for k, s in shapes.items()})


def test_expected_sparsity_is_zero_when_all_kept_and_one_when_none():
    assert float(expected_sparsity(_tiny_keep(1.0), head_size=2)) == 0.0
    assert float(expected_sparsity(_tiny_keep(0.0), head_size=2)) == 1.0
    assert prunable_parameters(_tiny_keep(1.0), head_size=2) == 2 * 4 * (4 * 2 * 2 + 2 * 3)  # L·H·(4·d·A + 2·I)


def test_expected_sparsity_matches_a_hand_count():
    keep = StructureMasks(
        hidden=torch.tensor([1.0, 1.0, 0.0, 1.0]),
        heads=torch.tensor([[1.0, 0.0], [1.0, 1.0]]),
        mha=torch.tensor([1.0, 0.0]),  # layer 1's attention is gone whatever its heads say
        intermediate=torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
        ffn=torch.tensor([1.0, 1.0]),
    )
    # attention: 1 head · 4·d (8) · 3 hidden = 24; FFN: (2 + 1) dims · 2 · 3 hidden = 18; of 176
    assert float(remaining_parameters(keep, head_size=2)) == 42
    assert float(expected_sparsity(keep, head_size=2)) == pytest.approx(1 - 42 / 176)
    # probabilities multiply: all 0.5 → 2 hidden · (8 · (2 layers · 0.5 · 1 head) + 2 · (2 · 0.5 · 1.5)) = 22
    assert float(expected_sparsity(_tiny_keep(0.5), head_size=2)) == pytest.approx(1 - 22 / 176)


def test_lagrangian_penalty_value_and_gradients():
    sparsity = torch.tensor(0.7, requires_grad=True)
    lambda1 = torch.tensor(2.0, requires_grad=True)
    lambda2 = torch.tensor(3.0, requires_grad=True)
    penalty = lagrangian_penalty(sparsity, 0.5, lambda1, lambda2)
    penalty.backward()
    assert float(penalty.detach()) == pytest.approx(2 * 0.2 + 3 * 0.04)
    assert float(sparsity.grad) == pytest.approx(2 + 2 * 3 * 0.2)
    assert float(lambda1.grad) == pytest.approx(0.2) and float(lambda2.grad) == pytest.approx(0.04)


def test_target_ramps_linearly_then_holds():
    assert target_sparsity_at(0, 100, 0.6) == 0.0
    assert target_sparsity_at(50, 100, 0.6) == pytest.approx(0.3)
    assert target_sparsity_at(100, 100, 0.6) == pytest.approx(0.6)
    assert target_sparsity_at(250, 100, 0.6) == pytest.approx(0.6)
    assert target_sparsity_at(0, 0, 0.6) == 0.6  # no ramp: the final target at once


def test_lagrangian_alone_steers_expected_sparsity_to_the_target():
    """The min-max game on its own (masks descend, multipliers ascend through maximize=True)
    settles at the target: the controller, without any task pulling the masks."""
    torch.manual_seed(0)
    masks = HardConcreteMasks(num_layers=4, num_heads=4, hidden_size=32, intermediate_size=64, droprate_init=0.5)
    multipliers = LagrangeMultipliers()
    optimizer = torch.optim.AdamW(
        [
            {"params": list(masks.parameters()), "lr": 0.1, "weight_decay": 0.0},
            {"params": list(multipliers.parameters()), "lr": 0.1, "weight_decay": 0.0, "maximize": True},
        ]
    )
    for step in range(300):
        masks.clamp_()
        sparsity = expected_sparsity(masks.keep_probabilities(), head_size=8)
        penalty = lagrangian_penalty(sparsity, target_sparsity_at(step, 100, 0.5), multipliers.lambda1, multipliers.lambda2)
        optimizer.zero_grad()
        penalty.backward()
        optimizer.step()
    masks.clamp_()
    final = float(expected_sparsity(masks.keep_probabilities(), head_size=8).detach())
    assert abs(final - 0.5) < 0.02
    assert float(multipliers.lambda2.detach()) > 0  # ascent on (ŝ − t)² ≥ 0 only ever raises λ2


def _minilm_sized_log_alphas(seed: int) -> StructureMasks:
    """log α as a pruning phase leaves them on MiniLM's shape (6 layers, 12 heads, 384, 1536):
    intermediate dimensions spread over the clamp range, coarse masks mostly at the top."""
    generator = torch.Generator().manual_seed(seed)

    def spread(*shape: int, centre: float) -> torch.Tensor:
        return (torch.randn(shape, generator=generator) * 2 + centre).clamp(LOG_ALPHA_MIN, LOG_ALPHA_MAX)

    return StructureMasks(
        hidden=spread(384, centre=3.0), heads=spread(6, 12, centre=2.0), mha=spread(6, centre=4.0),
        intermediate=spread(6, 1536, centre=0.0), ffn=spread(6, centre=4.0),
    )


@pytest.mark.parametrize("target", [0.3, 0.6, 0.9])
def test_binarise_at_hits_the_target_and_keeps_each_groups_ranking(target):
    log_alphas = _minilm_sized_log_alphas(seed=0)
    head_size = 32
    trained = float(expected_sparsity(binarise(log_alphas), head_size))
    masks, offset = binarise_at(log_alphas, head_size, target)
    assert abs(float(expected_sparsity(masks, head_size)) - target) < 0.005  # one hidden dim ≈ 0.0026
    assert (offset < 0) == (target > trained)  # more pruning needs lower log α
    # within a group, every kept unit has a log α at least as high as every dropped one
    for values, kept in ((log_alphas.intermediate, masks.intermediate), (log_alphas.heads, masks.heads)):
        for row, row_kept in zip(values, kept):
            if 0 < row_kept.sum() < row.numel():
                assert row[row_kept == 1].min() >= row[row_kept == 0].max()


def test_binarise_keeps_fewer_units_as_the_offset_falls():
    log_alphas = _minilm_sized_log_alphas(seed=1)
    sparsities = [float(expected_sparsity(binarise(log_alphas, o), 32)) for o in (-6.0, -3.0, 0.0, 3.0, 6.0)]
    assert sparsities == sorted(sparsities, reverse=True) and sparsities[0] > sparsities[-1]
    assert binarise(log_alphas, -100.0).hidden.sum() == 1  # the last hidden dimension stays


def test_lagrange_multipliers_are_one_element_vectors_and_load_states_saved_as_scalars():
    multipliers = LagrangeMultipliers()
    assert multipliers.lambda1.shape == (1,) and multipliers.lambda2.shape == (1,)  # DeepSpeed broadcasts them as bytes
    multipliers.load_state_dict({"lambda1": torch.tensor(0.25), "lambda2": torch.tensor(-1.5)})  # a checkpoint of before
    assert multipliers.lambda1.tolist() == [0.25] and multipliers.lambda2.tolist() == [-1.5]
    penalty = lagrangian_penalty(torch.tensor(0.7), 0.5, multipliers.lambda1, multipliers.lambda2)
    assert penalty.dim() == 0 and float(penalty) == pytest.approx(0.25 * 0.2 - 1.5 * 0.04)
