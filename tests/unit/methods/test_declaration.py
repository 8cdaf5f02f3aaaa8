"""A method's declaration (methods/declaration.py): the facts the pipeline reads before a trial."""

from __future__ import annotations

from pydantic import Field

from methods.declaration import MethodDeclaration, MethodParams
from methods.params.cofi import CoFiDeclaration, CoFiParams
from methods.params.finetune import FinetuneDeclaration, FinetuneParams
from methods.params.kd import KDDeclaration, KDParams
from methods.params.minilm import MiniLMDeclaration


class _WithRate(MethodParams):
    learning_rate: float | None = Field(default=None, gt=0)


class _Plain(MethodDeclaration):
    name = "plain"


class _Rated(MethodDeclaration):
    name = "rated"
    Params = _WithRate


def test_the_defaults_use_the_teacher_and_read_learning_rate_only_where_params_define_it():
    assert _Plain.needs_teacher(MethodParams()) is True
    assert _Plain.learning_rate_override(MethodParams()) is None
    assert _Rated.learning_rate_override(_WithRate(learning_rate=3e-4)) == 3e-4
    assert _Rated.learning_rate_override(_WithRate()) is None
    assert _Plain.same_modules_on_every_rank and not _Plain.uses_unlabeled_text and _Plain.implementation == ""


def test_the_built_ins_declare_what_the_plan_and_the_trial_read():
    assert FinetuneDeclaration.needs_teacher(FinetuneParams(init_from="pretrained")) is False
    assert FinetuneDeclaration.needs_teacher(FinetuneParams()) is True
    assert KDDeclaration.needs_teacher(KDParams(init_from="pretrained")) is True  # the teacher gives the soft targets
    assert CoFiDeclaration.learning_rate_override(CoFiParams(learning_rate=2e-5, finetune_learning_rate=1e-5)) == 2e-5
    assert not CoFiDeclaration.same_modules_on_every_rank and MiniLMDeclaration.uses_unlabeled_text
