"""Plain fine-tuning of a truncated student: the bottom layers of its source, the labels' loss only."""

from __future__ import annotations

import pytest

from methods import get_method
from methods._losses import task_loss
from methods.base import MethodContext, Progress, StudentDefaults
from methods.finetune import FinetuneParams
from tests.conftest import make_batch, make_tiny_bert
from tests.contract.test_method_contract import TASK

PROGRESS = Progress(step=0, total_steps=4, phase="finetune", phase_step=0, phase_steps=4)


def context(teacher=None, **student) -> MethodContext:
    return MethodContext(task=TASK, teacher=teacher, load_pretrained=lambda: make_tiny_bert(seed=2),
                         student=StudentDefaults(**student), learning_rate=1e-3)


def test_the_student_keeps_the_bottom_layers_of_the_teacher_and_learns_from_the_labels_only():
    teacher = make_tiny_bert(seed=1)
    method = get_method("finetune")({}, context(teacher, num_layers=1))
    student = method.build()
    assert student.config.num_hidden_layers == 1
    assert student.bert.encoder.layer[0].attention.self.query.weight.tolist() == teacher.bert.encoder.layer[0].attention.self.query.weight.tolist()
    student.eval()  # no dropout: the term is compared with the loss computed again
    batch = make_batch(batch_size=3, seq_len=6, seed=0)
    terms = method.loss(batch, PROGRESS)
    logits = student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]).logits
    assert list(terms) == ["task"] and terms["task"].item() == pytest.approx(task_loss(logits, batch["labels"], False).item())
    assert [p.name for p in method.phases(4)] == ["finetune"]


def test_the_teacher_is_needed_only_when_the_student_starts_from_it():
    assert get_method("finetune").needs_teacher(FinetuneParams())
    assert not get_method("finetune").needs_teacher(FinetuneParams(init_from="pretrained"))
    with pytest.raises(ValueError, match="needs the fine-tuned teacher"):
        get_method("finetune")({}, context(None, num_layers=1)).build()
