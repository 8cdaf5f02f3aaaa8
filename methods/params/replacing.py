"""The parameters Theseus and DCR share (the algorithm: `methods/_replacing.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from methods.declaration import MethodParams

SuccessorInit = Literal["bottom", "top", "every_kth"]


class ReplacingParams(MethodParams):
    """Which modules and successors; both replacing methods take these."""

    num_layers: int | None = Field(
        default=None, gt=0, description="successor layers = modules (default: len(split), else the spec's student)"
    )
    split: list[PositiveInt] | None = Field(
        default=None, description="teacher layers per module, bottom first, e.g. [3, 2, 1] (default: uniform)"
    )
    init: SuccessorInit = Field(
        default="bottom", description="successors start as the teacher's bottom n layers, top n, or each module's top layer"
    )
    layers: list[int] | None = Field(default=None, description="explicit teacher layers the successors start as")
    learning_rate: float | None = Field(default=None, gt=0, description="default: train.learning_rate")

    @model_validator(mode="after")
    def _module_counts_agree(self) -> ReplacingParams:
        counts = {
            name: count
            for name, count in (
                ("num_layers", self.num_layers),
                ("split", None if self.split is None else len(self.split)),
                ("layers", None if self.layers is None else len(self.layers)),
            )
            if count is not None
        }
        if len(set(counts.values())) > 1:
            raise ValueError(f"the number of modules disagrees: {counts}")
        if self.layers is not None and self.init != "bottom":
            raise ValueError(f"give either layers or init (got init={self.init!r}), not both")
        return self
