"""Vanilla KD's parameters (the algorithm: `methods/kd.py`)."""

from __future__ import annotations

from pydantic import Field

from methods.declaration import MethodParams
from methods.params.finetune import FinetuneDeclaration, FinetuneParams


class KDParams(FinetuneParams):
    alpha: float = Field(default=0.5, ge=0, le=1, description="weight of the soft-target term")
    temperature: float = Field(default=2.0, gt=0, description="softmax temperature T")


class KDDeclaration(FinetuneDeclaration):
    name = "kd"
    Params = KDParams
    implementation = "methods.kd:KnowledgeDistillation"
    summary = "Hinton distillation of the teacher's logits into a truncated student"

    @classmethod
    def needs_teacher(cls, params: MethodParams) -> bool:
        return True
