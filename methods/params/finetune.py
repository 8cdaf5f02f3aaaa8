"""Fine-tuning's parameters (the algorithm: `methods/finetune.py`)."""

from __future__ import annotations

from typing import Literal, cast

from pydantic import Field

from methods.declaration import MethodDeclaration, MethodParams


class FinetuneParams(MethodParams):
    num_layers: int | None = Field(default=None, gt=0, description="bottom k teacher layers (default: spec student)")
    layers: list[int] | None = Field(default=None, description="explicit teacher layer indices to keep")
    init_from: Literal["finetuned", "pretrained"] = Field(
        default="finetuned", description="take the layers from the fine-tuned teacher or the pretrained checkpoint"
    )
    learning_rate: float | None = Field(default=None, gt=0, description="default: train.learning_rate")


class FinetuneDeclaration(MethodDeclaration):
    name = "finetune"
    Params = FinetuneParams
    implementation = "methods.finetune:Finetune"
    summary = "fine-tune a truncated student (bottom k layers) on the task labels"

    @classmethod
    def needs_teacher(cls, params: MethodParams) -> bool:
        # the pipeline hands over the parameters validated by `Params`
        return cast(FinetuneParams, params).init_from == "finetuned"
