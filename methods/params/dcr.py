"""DCR's parameters (the algorithm: `methods/dcr.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from methods._schedules import validate_points
from methods.declaration import MethodDeclaration
from methods.params.replacing import ReplacingParams


class DCRParams(ReplacingParams):
    schedule: Literal["aggr20", "linear", "piecewise"] = Field(
        default="aggr20", description="how alpha falls from 1 (teacher) to 0 (student) over training"
    )
    anneal_fraction: float = Field(
        default=0.2, gt=0, le=1, description="linear schedule: alpha reaches 0 at this fraction of training"
    )
    points: list[tuple[float, float]] | None = Field(
        default=None, description="piecewise schedule: (training fraction, alpha) points, e.g. [[0, 1], [0.3, 0]]"
    )
    dfg_weight: float = Field(
        default=1.0, ge=0, description="Deep Feature Guidance weight lambda at alpha = 1 (annealed as lambda·alpha)"
    )
    gate: Literal["deterministic", "gumbel"] = Field(
        default="deterministic", description="blend with alpha itself, or with a relaxed-Bernoulli gate whose teacher probability is alpha"
    )
    gate_temperature: float = Field(default=1.0, gt=0, description="temperature of the gumbel gate")

    @field_validator("points")
    @classmethod
    def _valid_points(cls, points: list[tuple[float, float]] | None) -> list[tuple[float, float]] | None:
        return None if points is None else validate_points(points)

    @model_validator(mode="after")
    def _points_for_piecewise(self) -> DCRParams:
        if self.schedule == "piecewise":
            if self.points is None:
                raise ValueError("schedule 'piecewise' needs points: [[fraction, alpha], ...]")
        elif self.points is not None:
            raise ValueError(f"points apply to schedule 'piecewise', not {self.schedule!r}")
        return self


class DCRDeclaration(MethodDeclaration):
    name = "dcr"
    Params = DCRParams
    implementation = "methods.dcr:DeterministicContinuousReplacement"
    summary = "DCR: blend teacher modules into successor layers with an annealed weight, plus feature guidance"
