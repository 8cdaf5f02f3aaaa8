"""What a method is built with: the spec's student section and training defaults, the task."""

from __future__ import annotations

from types import SimpleNamespace

from methods.base import StudentDefaults, TaskInfo
from pipeline.config import spec_from_dict
from pipeline.training.context import method_context

BASE = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
        "student": {"num_layers": 1, "layers": [1]}, "train": {"learning_rate": 3.0e-5, "weight_decay": 0.02, "warmup_ratio": 0.2},
        "methods": {"finetune": {}}}
TASK = TaskInfo("synthetic", 2, False, ("class_0", "class_1"))


def test_the_context_carries_the_student_section_and_the_train_defaults():
    prepared = SimpleNamespace(task=TASK, tokenizer=[None] * 50)
    ctx = method_context(spec_from_dict(BASE), prepared, teacher=None)  # type: ignore[arg-type]
    assert ctx.task == TASK and ctx.teacher is None
    assert ctx.student == StudentDefaults(num_layers=1, layers=(1,))
    assert (ctx.learning_rate, ctx.weight_decay, ctx.warmup_ratio) == (3.0e-5, 0.02, 0.2)


def test_a_methods_own_learning_rate_wins_over_the_specs():
    prepared = SimpleNamespace(task=TASK, tokenizer=[None] * 50)
    assert method_context(spec_from_dict(BASE), prepared, None, learning_rate=1.0e-3).learning_rate == 1.0e-3  # type: ignore[arg-type]
