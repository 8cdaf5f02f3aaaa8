"""DCR on a tiny 4-layer teacher: blend endpoints, hand-computed blends and feature guidance,
schedules through on_step, the gumbel gate, frozen predecessors, export."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch

from methods._bert import classify, embed, encoder_layers, run_layers
from methods.base import MethodContext, Progress, StudentDefaults, TaskInfo
from methods.dcr import (
    DCRParams,
    DeterministicContinuousReplacement,
    blended_forward,
    feature_guidance_loss,
    gumbel_gates,
)
from tests.conftest import make_batch, make_tiny_bert

TASK = TaskInfo("tiny", 2, False, ("neg", "pos"))


def frozen_teacher():
    teacher = make_tiny_bert(num_layers=4, seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    teacher.classifier.weight.mul_(50)  # logits of order 1, so that differences between models show
    return teacher


def make_dcr(teacher=None, num_student_layers: int = 2, **params) -> DeterministicContinuousReplacement:
    ctx = MethodContext(
        task=TASK, teacher=teacher or frozen_teacher(), load_pretrained=lambda: None,
        student=StudentDefaults(num_layers=num_student_layers),
    )
    method = DeterministicContinuousReplacement(params, ctx)
    method.build()
    return method


def inputs_of(batch):
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def at(method, step: int, total: int) -> dict[str, float]:
    return method.on_step(Progress(step, total, "blending", step, total))


# -- the blend --------------------------------------------------------------------------------


def test_alpha_one_equals_the_teacher_and_alpha_zero_the_student():
    teacher = frozen_teacher()
    model = make_dcr(teacher).model.eval()
    inputs = inputs_of(make_batch(seed=2))
    with torch.no_grad():
        teacher_logits = teacher(**inputs).logits
        student_logits = model.student(**inputs).logits
        logits, pairs = blended_forward(model, inputs, [1.0, 1.0])
        torch.testing.assert_close(logits, teacher_logits, rtol=0, atol=1e-5)
        assert len(pairs) == 2
        logits, pairs = blended_forward(model, inputs, [0.0, 0.0])
        torch.testing.assert_close(logits, student_logits, rtol=0, atol=1e-5)
        assert pairs == []
        assert (teacher_logits - student_logits).abs().max() > 1e-2


def test_half_blend_matches_a_hand_computed_forward():
    teacher = frozen_teacher()
    model = make_dcr(teacher).model.eval()
    inputs = inputs_of(make_batch(seed=2))
    layers = encoder_layers(teacher)
    with torch.no_grad():
        hidden, mask = embed(teacher, inputs)
        # module 0: successor = copy of teacher layer 0, predecessor = teacher layers 0, 1
        site0 = 0.25 * run_layers(layers[0:2], hidden, mask) + 0.75 * layers[0](hidden, mask)
        # module 1: successor = copy of teacher layer 1, predecessor = teacher layers 2, 3
        site1 = 0.25 * run_layers(layers[2:4], site0, mask) + 0.75 * layers[1](site0, mask)
        expected = classify(teacher, site1)
        logits, pairs = blended_forward(model, inputs, [0.25, 0.25])
        torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(pairs[1][1], run_layers(layers[2:4], site0, mask), rtol=0, atol=1e-5)


def test_predecessors_are_not_run_once_alpha_is_zero():
    method = make_dcr(schedule="aggr20")
    calls = []
    original = method.model.run_predecessor
    method.model.run_predecessor = lambda *a: calls.append(a) or original(*a)
    assert at(method, 19, 100)["blend"] > 0
    method.loss(make_batch(), Progress(19, 100, "blending", 19, 100))
    assert len(calls) == 2
    calls.clear()
    for step in (20, 50, 99):
        assert at(method, step, 100) == {"blend": 0.0, "dfg_weight": 0.0}
        terms = method.loss(make_batch(), Progress(step, 100, "blending", step, 100))
        assert set(terms) == {"task"}
    assert calls == []


# -- deep feature guidance --------------------------------------------------------------------


def test_feature_guidance_is_zero_when_branches_agree():
    # four one-layer modules, successors initialised from the same layers: both branches agree
    method = make_dcr(num_student_layers=4, dfg_weight=2.0)
    method.model.eval()
    at(method, 0, 10)
    batch = make_batch()
    terms = method.loss(batch, Progress(0, 10, "blending", 0, 10))
    assert terms["_feature_mse"].item() == 0.0
    assert terms["feature_guidance"].item() == 0.0
    a = torch.randn(2, 3, 4)
    assert feature_guidance_loss([(a, a.clone()), (a * 2, a * 2)], torch.ones(2, 3)).item() == 0.0


def test_feature_guidance_matches_a_hand_computed_value():
    successor = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]], requires_grad=True)  # (batch 1, 3 tokens, hidden 2)
    predecessor = torch.tensor([[[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])  # the third token is padding and does not count
    loss = feature_guidance_loss([(successor, predecessor)], mask)
    assert loss.item() == pytest.approx((1 + 4 + 4 + 9) / 4)
    loss.backward()
    # d/ds of mean (s - p)²: 2(s - p)/4 on real tokens, 0 on padding; the target gets none
    expected = torch.tensor([[[0.5, 1.0], [1.0, 1.5], [0.0, 0.0]]])
    torch.testing.assert_close(successor.grad, expected)
    assert predecessor.grad is None
    two_sites = feature_guidance_loss([(successor, predecessor), (predecessor, successor)], mask)
    assert two_sites.item() == pytest.approx(2 * 4.5)  # summed over sites
    assert feature_guidance_loss([(successor, predecessor)], None).item() == pytest.approx((1 + 4 + 4 + 9 + 81 + 81) / 6)


def test_loss_terms_follow_the_annealed_weight():
    method = make_dcr(schedule="aggr20", dfg_weight=2.0)
    method.model.eval()
    batch = make_batch()
    expected_schedule = {0: (1.0, 2.0), 5: (0.65, 1.3), 10: (0.3, 0.6), 15: (0.15, 0.3)}
    for step, (alpha, weight) in expected_schedule.items():
        values = at(method, step, 100)
        assert values["blend"] == pytest.approx(alpha) and values["dfg_weight"] == pytest.approx(weight)
        terms = method.loss(batch, Progress(step, 100, "blending", step, 100))
        torch.testing.assert_close(terms["feature_guidance"].detach(), weight * terms["_feature_mse"])
        assert terms["_feature_mse"].item() > 0 and not terms["_feature_mse"].requires_grad


def test_zero_dfg_weight_keeps_only_the_task_loss_and_the_logged_mse():
    method = make_dcr(dfg_weight=0.0)
    at(method, 0, 100)
    assert set(method.loss(make_batch(), Progress(0, 100, "blending", 0, 100))) == {"task", "_feature_mse"}


# -- gradients and frozen parts ---------------------------------------------------------------


def test_gradients_reach_successors_and_predecessors_never_change():
    teacher = frozen_teacher()
    teacher_before = {k: v.clone() for k, v in teacher.state_dict().items()}
    method = make_dcr(teacher, schedule="linear", anneal_fraction=0.5)
    model = method.model
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    assert all(n in frozen_before for n, _ in model.predecessors.named_parameters(prefix="predecessors"))
    groups = method.param_groups(method.phases(6)[0])
    optimizer = torch.optim.AdamW([{"params": g.params, "lr": 1e-2, "weight_decay": g.weight_decay} for g in groups])
    for step in range(4):
        at(method, step, 6)
        optimizer.zero_grad()
        sum(v for k, v in method.loss(make_batch(seed=step), Progress(step, 6, "blending", step, 6)).items() if not k.startswith("_")).backward()
        if step == 1:  # alpha = 2/3: the top successor's gradient flows back into the bottom one
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.successors[0].parameters() if p.dim() == 2)
            assert all(p.grad is None for p in model.predecessors.parameters())
        optimizer.step()
    for n, p in model.named_parameters():
        if n in frozen_before:
            assert torch.equal(p, frozen_before[n]), n
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, teacher_before[k]), k


# -- gumbel gate ------------------------------------------------------------------------------


def test_gumbel_gates_at_endpoints_and_by_hand():
    assert gumbel_gates(0.0, 3, 1.0) == [0.0, 0.0, 0.0]
    assert gumbel_gates(1.0, 3, 1.0) == [1.0, 1.0, 1.0]
    torch.manual_seed(0)
    gates = gumbel_gates(0.3, 3, 0.5)
    torch.manual_seed(0)
    u = torch.rand(3, dtype=torch.float64)
    expected = [1 / (1 + math.exp(-(math.log(0.3 / 0.7) + math.log(x / (1 - x))) / 0.5)) for x in u.tolist()]
    assert gates == pytest.approx(expected)


def test_gumbel_gate_favours_the_teacher_with_probability_alpha():
    # P(sigmoid(logit(a) + L) > 1/2) = P(L > -logit(a)) = a for logistic noise L
    torch.manual_seed(0)
    gates = torch.tensor([gumbel_gates(0.3, 4, 1.0) for _ in range(3000)])
    assert ((gates > 0.5).float().mean().item()) == pytest.approx(0.3, abs=0.015)
    assert 0.0 < gates.min().item() and gates.max().item() < 1.0


def test_gumbel_variant_blends_with_the_sampled_gates():
    method = make_dcr(gate="gumbel", dfg_weight=0.0)
    method.model.eval()
    at(method, 5, 100)  # aggr20: alpha = 0.65
    batch = make_batch()
    torch.manual_seed(1)
    task = method.loss(batch, Progress(5, 100, "blending", 5, 100))["task"]
    torch.manual_seed(1)
    gates = gumbel_gates(0.65, 2, 1.0)
    assert gates != pytest.approx([0.65, 0.65], abs=1e-3)
    with torch.no_grad():
        logits, _ = blended_forward(method.model, inputs_of(batch), gates)
        deterministic, _ = blended_forward(method.model, inputs_of(batch), [0.65, 0.65])
    torch.testing.assert_close(task.detach(), torch.nn.functional.cross_entropy(logits, batch["labels"]))
    assert not torch.allclose(task.detach(), torch.nn.functional.cross_entropy(deterministic, batch["labels"]))


# -- parameters, phases, export ---------------------------------------------------------------


def test_schedule_parameters_are_validated():
    with pytest.raises(pydantic.ValidationError, match="needs points"):
        DCRParams(schedule="piecewise")
    with pytest.raises(pydantic.ValidationError, match="apply to schedule 'piecewise'"):
        DCRParams(points=[(0.0, 1.0), (0.5, 0.0)])
    with pytest.raises(pydantic.ValidationError, match="strictly increasing"):
        DCRParams(schedule="piecewise", points=[(0.5, 1.0), (0.5, 0.0)])
    with pytest.raises(pydantic.ValidationError):
        DCRParams(dfg_weight=-1.0)


def test_piecewise_and_linear_schedules_through_on_step():
    method = make_dcr(schedule="piecewise", points=[(0.0, 1.0), (0.5, 0.5), (0.8, 0.0)], dfg_weight=1.0)
    assert [at(method, s, 10)["blend"] for s in (0, 2, 5, 7, 8, 9)] == pytest.approx([1.0, 0.8, 0.5, 1 / 6, 0.0, 0.0])
    linear = make_dcr(schedule="linear", anneal_fraction=0.4)
    assert [at(linear, s, 10)["blend"] for s in (0, 2, 4, 9)] == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert [(p.name, p.steps, p.trainable) for p in linear.phases(10)] == [("blending", 10, ("successors",))]


def test_export_equals_the_pure_student_blend(tmp_path):
    method = make_dcr()
    with torch.no_grad():
        for p in method.model.successors.parameters():
            p.add_(0.01 * torch.randn_like(p))
    method.model.eval()
    inputs = inputs_of(make_batch(seed=4))
    with torch.no_grad():
        blended, _ = blended_forward(method.model, inputs, [0.0, 0.0])
        exported = method.export()
        assert exported.config.num_hidden_layers == 2
        torch.testing.assert_close(exported(**inputs).logits, blended, rtol=0, atol=1e-5)
        torch.testing.assert_close(method.eval_model()(**inputs).logits, blended, rtol=0, atol=1e-5)
