"""The rules of the method contract that live in methods/base.py as code: reserved loss terms,
group ownership, the learning rate the pipeline reads from a method's parameters."""

from __future__ import annotations

import pytest
import torch
from pydantic import Field

from methods import get_method, registered_methods
from methods.base import (
    RESERVED_LOSS_KEYS,
    Method,
    MethodParams,
    check_loss_terms,
    decay_groups,
    group_owner,
)


def test_a_reserved_loss_term_is_refused_by_name():
    terms = {"task": torch.tensor(1.0), "_accuracy": torch.tensor(0.5)}
    assert check_loss_terms(terms) is terms  # logged-only "_" terms are the method's to name
    assert "total" in RESERVED_LOSS_KEYS
    with pytest.raises(ValueError, match=r"kd\.loss returned the reserved loss term\(s\) \['total'\]"):
        check_loss_terms({"task": torch.tensor(1.0), "total": torch.tensor(2.0)}, "kd")


def test_a_group_belongs_to_the_name_before_its_first_dot():
    assert group_owner("student") == "student"
    assert group_owner("student.no_decay") == "student"
    assert group_owner("layer_map.no_decay.extra") == "layer_map"
    weight, bias = torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(2))
    groups = decay_groups("successor", [("dense.weight", weight), ("dense.bias", bias)], 1e-3, 0.01)
    assert [(g.name, group_owner(g.name), g.weight_decay) for g in groups] == [
        ("successor", "successor", 0.01), ("successor.no_decay", "successor", 0.0)
    ]


class _WithRate(MethodParams):
    learning_rate: float | None = Field(default=None, gt=0)


class _WithoutRate(MethodParams):
    other_rate: float = 1.0


def _method(params: type[MethodParams]) -> type[Method]:
    return type("M", (Method,), {"name": "m", "Params": params})


def test_the_learning_rate_the_pipeline_reads_is_the_params_field_when_there_is_one():
    with_rate = _method(_WithRate)
    assert with_rate.learning_rate_override(_WithRate(learning_rate=3e-4)) == 3e-4
    assert with_rate.learning_rate_override(_WithRate()) is None  # train.learning_rate then
    assert _method(_WithoutRate).learning_rate_override(_WithoutRate(other_rate=0.5)) is None


@pytest.mark.parametrize("name", registered_methods())
def test_every_built_in_reads_its_learning_rate_parameter(name):
    cls = get_method(name)
    if "learning_rate" not in cls.Params.model_fields:
        pytest.skip(f"{name} has no learning_rate parameter")
    assert cls.learning_rate_override(cls.Params.model_validate({"learning_rate": 2e-4})) == 2e-4
