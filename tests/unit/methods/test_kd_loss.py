"""Hinton KD against numbers computed by hand."""

from __future__ import annotations

import math

import torch

from methods._losses import kd_loss, task_loss


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


def test_kd_method_combines_terms_with_alpha():
    from methods.base import MethodContext, Progress, TaskInfo
    from methods.kd import KnowledgeDistillation
    from tests.conftest import make_batch, make_tiny_bert

    teacher = make_tiny_bert(seed=1)
    ctx = MethodContext(task=TaskInfo("t", 2, False), teacher=teacher, load_pretrained=make_tiny_bert)
    method = KnowledgeDistillation({"alpha": 0.25, "temperature": 3.0, "num_layers": 2}, ctx)
    student = method.build().eval()
    batch = make_batch()
    terms = method.loss(batch, Progress(0, 1, "finetune", 0, 1))
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    zs, zt = student(**inputs).logits, teacher(**inputs).logits
    assert torch.allclose(terms["kd"], 0.25 * kd_loss(zs, zt, 3.0, False))
    assert torch.allclose(terms["task"], 0.75 * torch.nn.functional.cross_entropy(zs, batch["labels"]))
    # gradients reach the student only
    sum(terms.values()).backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert student.classifier.weight.grad is not None
