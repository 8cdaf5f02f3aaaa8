"""CoFi's parameters (the algorithm: `methods/cofi.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from methods.declaration import MethodDeclaration, MethodParams


class CoFiParams(MethodParams):
    target_sparsity: float = Field(
        default=0.6, ge=0, lt=1, description="final share of encoder parameters pruned (paper's bookkeeping)"
    )
    learning_rate: float | None = Field(default=None, gt=0, description="warm-up and pruning lr (default: train.learning_rate)")
    finetune_learning_rate: float | None = Field(
        default=None, gt=0, description="lr of the pruned model's fine-tuning (default: the learning rate)"
    )
    reg_learning_rate: float = Field(default=0.01, gt=0, description="lr of the mask log-alphas and the Lagrange multipliers")
    distill_warmup_fraction: float = Field(
        default=0.05, ge=0, le=1, description="share of the steps distilling before any pruning"
    )
    pruning_fraction: float = Field(
        default=0.6, ge=0, le=1, description="share of the steps training the masks (the rest fine-tunes the pruned model)"
    )
    sparsity_warmup_fraction: float = Field(
        default=0.2, ge=0, le=1, description="share of the pruning phase over which the target ramps from 0"
    )
    droprate_init: float = Field(default=0.5, gt=0, lt=1, description="initial drop rate of the FFN-dimension masks")
    distill_temperature: float = Field(default=2.0, gt=0, description="temperature T of the prediction distillation")
    distill_pred_weight: float = Field(default=0.1, ge=0, description="weight of T²·KL(teacher || student)")
    distill_layer_weight: float = Field(default=0.9, ge=0, description="weight of the layer distillation MSE")
    task_weight: float = Field(default=0.0, ge=0, description="weight of the task loss while distilling")
    distill_layer_stride: int = Field(
        default=3, gt=0, description="teacher layers matched: every n-th from the top (3: 2,5,8,11 of 12)"
    )
    layer_order_constraint: Literal["auto", "on", "off"] = Field(
        default="auto", description="ordered layer matching; auto: on for the small GLUE tasks"
    )
    finetune_distill: bool = Field(default=True, description="distil while fine-tuning the pruned model (else task loss)")
    freeze_embeddings: bool = Field(default=True, description="keep the embeddings frozen in every phase")
    binarise_tolerance: float | None = Field(
        default=0.01,
        ge=0,
        description=(
            "at the surgery, binary masks that miss target_sparsity by more than this are moved to it "
            "(one log-alpha offset for all masks); null keeps the masks as trained"
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> CoFiParams:
        if self.distill_warmup_fraction + self.pruning_fraction > 1:
            raise ValueError("distill_warmup_fraction + pruning_fraction must not exceed 1")
        if self.distill_pred_weight + self.distill_layer_weight + self.task_weight <= 0:
            raise ValueError("at least one of distill_pred_weight, distill_layer_weight, task_weight must be positive")
        return self


class CoFiDeclaration(MethodDeclaration):
    name = "cofi"
    Params = CoFiParams
    implementation = "methods.cofi:CoFi"
    summary = "CoFi structured pruning: L0 masks on heads, FFN dims, layers and hidden dims + distillation"
    same_modules_on_every_rank = False  # a rank's hard-concrete draw can switch a whole sub-layer off
