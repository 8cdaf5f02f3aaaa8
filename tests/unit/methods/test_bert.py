"""The BERT surgery every layer-dropping method shares: which layers a student keeps, and a copy
of the teacher that holds only those."""

from __future__ import annotations

import pytest

from methods._bert import num_layers, student_from_layers, student_layer_indices
from tests.conftest import make_tiny_bert


def test_the_methods_layers_win_then_its_count_then_the_specs_then_half_the_teacher():
    assert student_layer_indices(6, None, [0, 2, 5], 2, [1]) == [0, 2, 5]
    assert student_layer_indices(6, 2, None, 4, [1]) == [0, 1]
    assert student_layer_indices(6, None, None, 4, [1, 3]) == [1, 3]
    assert student_layer_indices(6, None, None, 4) == [0, 1, 2, 3]
    assert student_layer_indices(5, None, None) == [0, 1, 2]  # half of 5, rounded up


def test_layers_that_do_not_fit_or_repeat_are_refused():
    with pytest.raises(ValueError, match=r"do not fit a 4-layer teacher"):
        student_layer_indices(4, None, [0, 4])
    with pytest.raises(ValueError, match="strictly increasing"):
        student_layer_indices(4, None, [2, 1])


def test_the_student_is_a_copy_holding_only_the_kept_layers():
    teacher = make_tiny_bert(num_layers=4, seed=3)
    student = student_from_layers(teacher, [1, 3])
    assert num_layers(student) == 2 and student.config.num_hidden_layers == 2 and num_layers(teacher) == 4
    kept = [layer.output.dense.weight.tolist() for layer in student.bert.encoder.layer]
    assert kept == [teacher.bert.encoder.layer[i].output.dense.weight.tolist() for i in (1, 3)]
    assert all(p.requires_grad for p in student.parameters())
    with pytest.raises(ValueError, match=r"must be indices in \[0, 4\)"):
        student_from_layers(teacher, [4])
