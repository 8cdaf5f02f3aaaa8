"""Patient KD's parameters (the algorithm: `methods/pkd.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from methods.params.kd import KDDeclaration, KDParams


class PKDParams(KDParams):
    alpha: float = Field(default=0.7, ge=0, le=1, description="weight of the soft-target term (1 - alpha on CE)")
    temperature: float = Field(default=10.0, gt=0, description="softmax temperature T")
    beta: float = Field(default=500.0, ge=0, description="weight of the patient [CLS] loss (element-averaged MSE)")
    layer_map: Literal["skip", "last"] | list[int] = Field(
        default="skip",
        description="teacher layers for the intermediate student layers: skip, last, or 0-based indices",
    )
    normalize: bool = Field(default=True, description="L2-normalise the [CLS] vectors before the MSE")


class PKDDeclaration(KDDeclaration):
    name = "pkd"
    Params = PKDParams
    implementation = "methods.pkd:PatientKD"
    summary = "Patient KD: soft targets plus intermediate [CLS] states of skip/last teacher layers"
