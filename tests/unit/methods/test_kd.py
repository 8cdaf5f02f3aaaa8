"""Knowledge distillation: the soft term weighs alpha, the labels' term the rest; the teacher is required."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from methods import get_method
from methods._losses import kd_loss
from methods.base import MethodContext, Progress, StudentDefaults
from methods.kd import KDParams
from tests.conftest import make_batch, make_tiny_bert
from tests.contract.test_method_contract import TASK

PROGRESS = Progress(step=0, total_steps=10, phase="finetune", phase_step=0, phase_steps=10)


def kd(**params):
    teacher = make_tiny_bert(seed=1).eval()
    ctx = MethodContext(task=TASK, teacher=teacher, load_pretrained=make_tiny_bert, student=StudentDefaults(num_layers=1),
                        learning_rate=1e-3)
    method = get_method("kd")(params, ctx)
    method.build().eval()  # no dropout: the terms are compared with the losses computed again
    return method, teacher


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


def test_alpha_one_drops_the_labels_term_and_kd_always_needs_the_teacher():
    method, _ = kd(alpha=1.0)
    assert set(method.loss(make_batch(batch_size=2, seq_len=6, seed=1), PROGRESS)) == {"kd"}
    assert get_method("kd").needs_teacher(KDParams(init_from="pretrained"))
    with pytest.raises(ValidationError):
        KDParams(alpha=1.5)
    with pytest.raises(ValidationError):
        KDParams(temperature=0)
