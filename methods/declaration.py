"""What the pipeline knows of a method before any trial runs, importable without torch.

`drydock validate`, `drydock plan` and `drydock methods` read a method's parameter model and a
few facts about it. Were those only on the `Method` class, each of these commands would load
torch and transformers with it (about 5 s of the 6 s `drydock validate` took). So a
method is declared in two parts, as transformers splits `configuration_*.py` from
`modeling_*.py`:

- a `MethodDeclaration` subclass in a module that imports neither torch nor transformers: its
  `name`, `Params` (the spec's parameters are validated by it, once, where they land),
  `summary`, `same_modules_on_every_rank`, `uses_unlabeled_text`, `needs_teacher(params)`,
  `learning_rate_override(params)`, and `implementation`, the `module:Class` of the method;
- the `Method` subclass (`methods/base.py`), which subclasses its declaration, so the two cannot
  disagree on a fact.

The registry (`methods/__init__.py`) lists declarations; `get_method` imports the implementation
only when a trial runs. A plugin may still register its `Method` subclass directly: it is its
own declaration, and validating a spec that names it imports torch.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class MethodParams(BaseModel):
    """Base of every method's parameter model: frozen, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class MethodDeclaration:
    """A method as the spec, the plan and the model card see it. Subclasses set `name`, `Params`
    and `implementation`."""

    name: ClassVar[str]
    Params: ClassVar[type[MethodParams]] = MethodParams
    # "module:Class" of the Method subclass; empty where the declaration is the Method itself
    implementation: ClassVar[str] = ""
    # whether build() needs ctx.teacher (the fine-tuned teacher); see needs_teacher()
    uses_teacher: ClassVar[bool] = True
    # False where each rank's forward may run other modules (methods/base.py): no ZeRO-3
    same_modules_on_every_rank: ClassVar[bool] = True
    # whether the method asks for unlabeled text (`Method.unlabeled`): the plan says its
    # distillation on that text is not in the estimate
    uses_unlabeled_text: ClassVar[bool] = False
    # one-line description for `drydock methods` and the model card
    summary: ClassVar[str] = ""

    @classmethod
    def needs_teacher(cls, params: MethodParams) -> bool:
        """Whether this configuration needs the fine-tuned teacher (the pipeline fetches one)."""
        return cls.uses_teacher

    @classmethod
    def learning_rate_override(cls, params: MethodParams) -> float | None:
        """The learning rate these parameters set for the trial (it becomes `ctx.learning_rate`),
        or None for the spec's `train.learning_rate`. By default the `learning_rate` field of the
        Params model, when it defines one: the one parameter name the pipeline reads."""
        return getattr(params, "learning_rate", None) if "learning_rate" in cls.Params.model_fields else None
