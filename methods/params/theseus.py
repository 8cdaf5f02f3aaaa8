"""BERT-of-Theseus' parameters (the algorithm: `methods/theseus.py`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from methods._schedules import ReplacementScheduleKind
from methods.declaration import MethodDeclaration
from methods.params.replacing import ReplacingParams


class TheseusParams(ReplacingParams):
    schedule: ReplacementScheduleKind = Field(
        default="linear", description="linear curriculum, constant rate, or anti-curriculum"
    )
    base_rate: float = Field(
        default=0.3, ge=0, le=1,
        description="b: p at step 0 of the curriculum (the anti-curriculum starts at 1 - b); the constant schedule's p",
    )
    slope: float | None = Field(
        default=None, gt=0, description="k: increase of p per optimizer step (curricula); sets R = (1 - b)/k"
    )
    replacing_steps: int | None = Field(
        default=None, gt=0, description="R: steps until p = 1 (curriculum), or the replacing phase's length (constant, anti)"
    )
    replacing_fraction: float = Field(
        default=0.5, gt=0, le=1, description="R as a fraction of training, when neither slope nor replacing_steps is given"
    )

    @model_validator(mode="after")
    def _one_way_to_give_r(self) -> TheseusParams:
        if self.slope is not None and self.replacing_steps is not None:
            raise ValueError("give either slope or replacing_steps, not both")
        if self.slope is not None and self.schedule == "constant":
            raise ValueError("slope applies to the linear and anti_curriculum schedules; the constant schedule takes replacing_steps or replacing_fraction")
        return self


class TheseusDeclaration(MethodDeclaration):
    name = "theseus"
    Params = TheseusParams
    implementation = "methods.theseus:Theseus"
    summary = "BERT-of-Theseus: replace teacher modules by successor layers with a rising Bernoulli rate"
    same_modules_on_every_rank = False  # each rank draws its own successors and predecessors
