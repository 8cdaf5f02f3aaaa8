"""The context a method is built with: the task, the frozen teacher, the spec's defaults."""

from __future__ import annotations

from transformers import PreTrainedModel

from methods.base import MethodContext, StudentDefaults
from pipeline.config import SweepSpec
from pipeline.prepare.models import pretrained_loader
from pipeline.prepare.stage import Prepared


def method_context(
    spec: SweepSpec,
    prepared: Prepared,
    teacher: PreTrainedModel | None,
    learning_rate: float | None = None,
) -> MethodContext:
    s = spec.student
    return MethodContext(
        task=prepared.task,
        teacher=teacher,
        load_pretrained=pretrained_loader(spec.teacher, prepared.task, len(prepared.tokenizer)),
        student=StudentDefaults(
            num_layers=s.num_layers,
            layers=tuple(s.layers) if s.layers else None,
            hidden_size=s.hidden_size,
            num_heads=s.num_heads,
            intermediate_size=s.intermediate_size,
        ),
        learning_rate=learning_rate or spec.train.learning_rate,
        weight_decay=spec.train.weight_decay,
        warmup_ratio=spec.train.warmup_ratio,
    )
