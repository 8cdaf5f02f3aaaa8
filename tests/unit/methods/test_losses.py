"""Hinton KD, PKD's patience loss and MiniLM's relation losses against numbers computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from methods._losses import (
    kd_loss,
    patience_loss,
    relation_kl,
    relation_log_probs,
    self_attention_relation_losses,
    split_relation_heads,
    task_loss,
)

# --------------------------------------------------------------------------------------------
# patience loss (PKD)
# --------------------------------------------------------------------------------------------


def test_patience_loss_normalises_then_averages_over_elements():
    # [3, 4] / 5 = [0.6, 0.8] against [1, 0]: squared errors 0.16 and 0.64, mean over 2 = 0.4
    student, teacher = torch.tensor([[[3.0, 4.0]]]), torch.tensor([[[1.0, 0.0]]])
    assert float(patience_loss(student, teacher)) == pytest.approx(0.4)
    # without normalisation: (3-1)^2 = 4 and 4^2 = 16, mean 10
    assert float(patience_loss(student, teacher, normalize=False)) == pytest.approx(10.0)
    # a second matched layer that agrees halves it: the mean runs over layers × hidden too
    # (a sum over the hidden dimension, TextBrewer's convention, would give 0.8 and 0.4)
    two_layers_student = torch.tensor([[[3.0, 4.0], [0.0, 2.0]]])
    two_layers_teacher = torch.tensor([[[1.0, 0.0], [0.0, 5.0]]])
    assert float(patience_loss(two_layers_student, two_layers_teacher)) == pytest.approx(0.2)


def test_patience_loss_is_zero_for_equal_states_and_ignores_scale_when_normalised():
    states = torch.randn(3, 2, 8)
    assert float(patience_loss(states, states.clone())) == 0.0
    assert float(patience_loss(2.5 * states, states)) == pytest.approx(0.0, abs=1e-12)
    assert float(patience_loss(2.5 * states, states, normalize=False)) > 0


# --------------------------------------------------------------------------------------------
# relations (MiniLM)
# --------------------------------------------------------------------------------------------


def _row_kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)


def test_split_relation_heads_keeps_contiguous_slices():
    states = torch.arange(8.0).reshape(1, 1, 8)
    heads = split_relation_heads(states, 2)
    assert heads.shape == (1, 2, 1, 4)
    assert heads[0, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert heads[0, 1, 0].tolist() == [4.0, 5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="3 relation heads"):
        split_relation_heads(states, 3)


def test_relation_log_probs_is_a_scaled_softmax_over_real_keys():
    mask = torch.tensor([[1, 1]])
    # d = 1: scores of query 0 are [ln 3, 0] -> [3/4, 1/4]; query 1 scores [0, 0] -> [1/2, 1/2]
    queries = torch.tensor([[[[1.0], [0.0]]]])
    keys = torch.tensor([[[[math.log(3.0)], [0.0]]]])
    probs = relation_log_probs(queries, keys, mask).exp()
    torch.testing.assert_close(probs, torch.tensor([[[[0.75, 0.25], [0.5, 0.5]]]]))
    # d = 4: a dot product of 2·ln 3 divided by sqrt(4) gives the same distribution
    queries4 = torch.tensor([[[[2.0, 0, 0, 0], [0.0, 0, 0, 0]]]])
    keys4 = torch.tensor([[[[math.log(3.0), 0, 0, 0], [0.0, 0, 0, 0]]]])
    torch.testing.assert_close(relation_log_probs(queries4, keys4, mask).exp(), probs)
    # a padded key gets probability exactly 0 and the rest renormalise
    keys_padded = torch.tensor([[[[math.log(3.0)], [0.0], [5.0]]]])
    queries_padded = torch.tensor([[[[1.0], [0.0], [1.0]]]])
    padded = relation_log_probs(queries_padded, keys_padded, torch.tensor([[1, 1, 0]])).exp()
    assert padded[0, 0, :, 2].tolist() == [0.0, 0.0, 0.0]
    torch.testing.assert_close(padded[0, 0, 0], torch.tensor([0.75, 0.25, 0.0]))


def test_relation_kl_averages_heads_and_real_queries_per_example_then_the_batch():
    kl = _row_kl([0.75, 0.25], [0.5, 0.5])  # 3/4·ln(3/2) + 1/4·ln(1/2)
    assert kl == pytest.approx(0.130812, abs=1e-6)
    kl_long = _row_kl([0.375, 0.125, 0.5], [0.25, 0.25, 0.5])
    # example 0 (2 real tokens): one differing row, one equal row -> kl / 2; its padded query
    # row differs wildly and must not count. example 1 (3 real tokens): every row -> kl_long
    teacher = torch.tensor([
        [[[0.75, 0.25, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]],
        [[[0.375, 0.125, 0.5]] * 3],
    ])
    student = torch.tensor([
        [[[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.01, 0.99, 0.0]]],
        [[[0.25, 0.25, 0.5]] * 3],
    ])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    got = relation_kl(teacher.clamp_min(1e-30).log(), student.clamp_min(1e-30).log(), mask)
    assert float(got) == pytest.approx((kl / 2 + kl_long) / 2, abs=1e-6)
    # two identical heads average to the same value
    two_heads = relation_kl(teacher.repeat(1, 2, 1, 1).clamp_min(1e-30).log(), student.repeat(1, 2, 1, 1).clamp_min(1e-30).log(), mask)
    assert float(two_heads) == pytest.approx(float(got), abs=1e-7)


def test_value_relation_of_a_dk16_student_against_a_dk32_teacher():
    # teacher d_k 32: v0 = s·e1 with s^2 / sqrt(32) = ln 3, v1 = 0 -> rows [3/4, 1/4], [1/2, 1/2]
    # student d_k 16: v0 = 2·e1, v1 = 0 -> scores [4 / 4, 0] -> rows [e/(e+1), 1/(e+1)], [1/2, 1/2]
    teacher_values = torch.zeros(1, 2, 32)
    teacher_values[0, 0, 0] = math.sqrt(math.log(3.0) * math.sqrt(32))
    student_values = torch.zeros(1, 2, 16)
    student_values[0, 0, 0] = 2.0
    mask = torch.ones(1, 2, dtype=torch.long)
    losses = self_attention_relation_losses(
        {"value": teacher_values}, {"value": student_values}, mask, relation_heads=1, relations=("value_relation",)
    )
    e = math.e
    expected = _row_kl([0.75, 0.25], [e / (e + 1), 1 / (e + 1)]) / 2  # the second row agrees
    assert set(losses) == {"value_relation"}
    assert float(losses["value_relation"]) == pytest.approx(expected, abs=1e-6)


def test_value_relation_is_zero_when_the_relations_agree_across_widths():
    # teacher values 2^(-1/4)·[A, A] (d 32): V·Vᵀ/sqrt(32) = 2^(-1/2)·2·A·Aᵀ/(4·sqrt 2) = A·Aᵀ/4,
    # the student's A·Aᵀ/sqrt(16): same relation although d_k differs
    student_values = torch.randn(2, 5, 16)
    teacher_values = 2 ** -0.25 * torch.cat([student_values, student_values], dim=-1)
    mask = torch.ones(2, 5, dtype=torch.long)
    losses = self_attention_relation_losses(
        {"value": teacher_values}, {"value": student_values}, mask, 1, ("value_relation",)
    )
    assert float(losses["value_relation"]) == pytest.approx(0.0, abs=1e-6)
    losses = self_attention_relation_losses(
        {"value": teacher_values}, {"value": student_values + 0.5 * torch.randn(2, 5, 16)}, mask, 1, ("value_relation",)
    )
    assert float(losses["value_relation"]) > 1e-3


def _projections(batch: int, length: int, width: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(batch, length, width, generator=g) for name in ("query", "key", "value")}


def test_relation_losses_are_zero_for_a_copy_and_name_every_relation():
    teacher = _projections(2, 6, 32, seed=0)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    names = ("attention", "value_relation", "query_relation", "key_relation")
    losses = self_attention_relation_losses(teacher, {k: v.clone() for k, v in teacher.items()}, mask, 4, names)
    assert set(losses) == set(names)
    for name, value in losses.items():
        assert float(value) == pytest.approx(0.0, abs=1e-6), name


def test_relation_heads_let_head_counts_differ():
    # teacher width 32 (4 heads of 8), student width 16 (2 heads of 8): with 4 relation heads
    # both sides are cut into 4 slices (8 and 4 wide) and compared slice by slice
    teacher, student = _projections(2, 5, 32, seed=1), _projections(2, 5, 16, seed=2)
    mask = torch.tensor([[1] * 5, [1] * 3 + [0] * 2])
    got = self_attention_relation_losses(teacher, student, mask, 4, ("attention",))["attention"]
    expected = 0.0
    for head in range(4):
        t = relation_log_probs(
            teacher["query"][None, :, :, 8 * head : 8 * head + 8].transpose(0, 1),
            teacher["key"][None, :, :, 8 * head : 8 * head + 8].transpose(0, 1),
            mask,
        )
        s = relation_log_probs(
            student["query"][None, :, :, 4 * head : 4 * head + 4].transpose(0, 1),
            student["key"][None, :, :, 4 * head : 4 * head + 4].transpose(0, 1),
            mask,
        )
        expected += float(relation_kl(t, s, mask)) / 4  # one head each: average the heads
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_padding_does_not_change_relation_losses_and_gradients_reach_the_student():
    teacher, student = _projections(2, 5, 32, seed=3), _projections(2, 5, 16, seed=4)
    mask = torch.tensor([[1] * 5, [1] * 3 + [0] * 2])
    names = ("attention", "value_relation", "query_relation", "key_relation")
    base = self_attention_relation_losses(teacher, student, mask, 4, names)
    # three more padded positions holding arbitrary values, and the padded slots of example 1
    # changed as well
    g = torch.Generator().manual_seed(5)
    longer_teacher = {k: torch.cat([v, 9 * torch.randn(2, 3, 32, generator=g)], dim=1) for k, v in teacher.items()}
    longer_student = {k: torch.cat([v, 9 * torch.randn(2, 3, 16, generator=g)], dim=1) for k, v in student.items()}
    for v in longer_student.values():
        v[1, 3:5] = 7.0
    longer_mask = torch.cat([mask, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    padded = self_attention_relation_losses(longer_teacher, longer_student, longer_mask, 4, names)
    for name in names:
        torch.testing.assert_close(padded[name], base[name])

    leaf = {k: v.clone().requires_grad_(True) for k, v in student.items()}
    sum(self_attention_relation_losses(teacher, leaf, mask, 4, names).values()).backward()
    assert all(v.grad is not None and v.grad.abs().sum() > 0 for v in leaf.values())
    assert all(float(v.grad[1, 3:].abs().sum()) == 0.0 for v in leaf.values())  # padding gets none


def test_relations_stay_float32_under_bf16_autocast():
    # the loop runs bf16 autocast on GPUs; relation KLs compare distributions that differ in the
    # third digit, so the scores must not be computed in bf16
    teacher, student = _projections(2, 5, 32, seed=6), _projections(2, 5, 16, seed=7)
    teacher = {k: v.bfloat16().float() for k, v in teacher.items()}
    student = {k: v.bfloat16().float() for k, v in student.items()}
    mask = torch.tensor([[1] * 5, [1] * 3 + [0] * 2])
    reference = self_attention_relation_losses(teacher, student, mask, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = self_attention_relation_losses(teacher, student, mask, 4)
    for name, value in under_autocast.items():
        assert value.dtype == torch.float32
        torch.testing.assert_close(value, reference[name])


def test_kd_loss_matches_hand_computation():
    # teacher logits [2, 0] at T=2 -> softmax([1, 0]) = [e/(e+1), 1/(e+1)] = [0.731059, 0.268941]
    # student logits [0, 0] -> [0.5, 0.5]
    # KL(t||s) = 0.731059*ln(1.462117) + 0.268941*ln(0.537883) = 0.277718 - 0.166775 = 0.110943
    # times T^2 = 4 -> 0.443773
    got = kd_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 0.0]]), temperature=2.0, regression=False)
    p = math.e / (math.e + 1)
    expected = 4 * (p * math.log(p / 0.5) + (1 - p) * math.log((1 - p) / 0.5))
    assert abs(float(got) - expected) < 1e-6
    assert abs(float(got) - 0.443773) < 1e-5


def test_kd_loss_mean_reduction_also_divides_by_the_classes():
    # PKD's official reduction: the same example as above over its 2 classes -> 0.443773 / 2
    got = kd_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 0.0]]), temperature=2.0, regression=False, reduction="mean")
    assert abs(float(got) - 0.443773 / 2) < 1e-5
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(kd_loss(a, b, 2.0, False, reduction="mean"), kd_loss(a, b, 2.0, False) / 3)


def test_kd_loss_is_batch_mean_and_zero_for_equal_logits():
    z = torch.randn(5, 3)
    assert float(kd_loss(z, z, 4.0, False)) < 1e-6
    a, b = torch.randn(1, 3), torch.randn(1, 3)
    single = kd_loss(a, b, 2.0, False)
    double = kd_loss(torch.cat([a, a]), torch.cat([b, b]), 2.0, False)
    assert torch.allclose(single, double)


def test_regression_uses_mse():
    s, t = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.0], [4.0]])
    assert float(kd_loss(s, t, 2.0, True)) == (1 + 4) / 2
    assert float(task_loss(s, torch.tensor([1.0, 1.0]), True)) == (0 + 1) / 2
