"""MiniLM's parameters (the algorithm: `methods/minilm.py`)."""

from __future__ import annotations

from pydantic import Field

from methods.declaration import MethodDeclaration, MethodParams


class MiniLMParams(MethodParams):
    num_layers: int | None = Field(default=None, gt=0, description="student depth (default: spec student)")
    layers: list[int] | None = Field(
        default=None, description="teacher layers copied into a student of the teacher's shape (default: bottom)"
    )
    hidden_size: int | None = Field(default=None, gt=0, description="student width (default: spec student, else the teacher's)")
    num_heads: int | None = Field(default=None, gt=0, description="student heads (default: spec student, else the teacher's)")
    intermediate_size: int | None = Field(
        default=None, gt=0, description="student FFN size (default: spec student, else the teacher's scaled with the width)"
    )
    relation_heads: int | None = Field(
        default=None, gt=0, description="relation heads Q/K/V are split into on both sides (default: the teacher's heads)"
    )
    query_key_relations: bool = Field(default=False, description="add MiniLMv2's query-query and key-key relations")
    teacher_assistant: bool = Field(
        default=False, description="first distil a teacher-depth, student-width assistant, then the student from it"
    )
    distill_epochs: float = Field(default=1.0, gt=0, description="epochs over the unlabeled set distilling the student")
    assistant_epochs: float | None = Field(
        default=None, gt=0, description="epochs over the unlabeled set distilling the assistant (default: distill_epochs)"
    )
    finetune_epochs: float | None = Field(
        default=None, gt=0, description="labeled epochs of fine-tuning after distillation (default: the train budget)"
    )
    unlabeled_samples: int | None = Field(
        default=None, gt=0, description="cap on training texts used for distillation (default: all)"
    )
    unlabeled_files: list[str] = Field(default=[], description="extra text files for distillation, one text per line")
    distill_learning_rate: float | None = Field(default=None, gt=0, description="default: learning_rate")
    share_distillation: bool = Field(
        default=False,
        description="distil once per distillation setting and reuse the distilled student in every trial of the workdir "
        "with the same teacher, data and distillation parameters (then only fine-tuning depends on the seed)",
    )
    learning_rate: float | None = Field(default=None, gt=0, description="default: train.learning_rate")


class MiniLMDeclaration(MethodDeclaration):
    name = "minilm"
    Params = MiniLMParams
    implementation = "methods.minilm:MiniLM"
    uses_unlabeled_text = True  # the task's training text without labels, and unlabeled_files
    summary = "MiniLM: distil last-layer attention and value relations on task text, then fine-tune"
