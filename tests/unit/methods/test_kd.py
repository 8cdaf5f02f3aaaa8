"""Knowledge distillation: the soft term weighs alpha, the labels' term the rest; the teacher is required."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from methods import get_method
from methods._losses import kd_loss, task_loss
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


def test_the_loss_is_alpha_times_the_soft_term_plus_the_rest_times_the_labels_term():
    method, teacher = kd(alpha=0.25, temperature=3.0)
    batch = make_batch(batch_size=4, seq_len=8, seed=0)
    terms = method.loss(batch, PROGRESS)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    student, soft = method.model(**inputs).logits, teacher(**inputs).logits
    assert set(terms) == {"kd", "task"}
    assert terms["kd"].item() == pytest.approx(0.25 * kd_loss(student, soft, 3.0, False).item(), rel=1e-5)
    assert terms["task"].item() == pytest.approx(0.75 * task_loss(student, batch["labels"], False).item(), rel=1e-5)


def test_alpha_one_drops_the_labels_term_and_kd_always_needs_the_teacher():
    method, _ = kd(alpha=1.0)
    assert set(method.loss(make_batch(batch_size=2, seq_len=6, seed=1), PROGRESS)) == {"kd"}
    assert get_method("kd").needs_teacher(KDParams(init_from="pretrained"))
    with pytest.raises(ValidationError):
        KDParams(alpha=1.5)
    with pytest.raises(ValidationError):
        KDParams(temperature=0)
