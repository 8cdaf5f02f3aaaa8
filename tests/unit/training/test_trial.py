"""A trial's method parameters: the spec's fixed values, then the sampled point; domains fall back."""

from __future__ import annotations

from pipeline.config import spec_from_dict
from pipeline.training.trial import resolve_params

BASE = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
        "methods": {"kd": {"alpha": 0.9, "temperature": {"grid": [3.0, 5.0]}}}}


def test_fixed_values_then_the_sampled_point_and_a_domain_left_unsampled_is_the_default():
    spec = spec_from_dict(BASE)
    assert (resolve_params(spec, "kd").alpha, resolve_params(spec, "kd").temperature) == (0.9, 2.0)  # 2.0: KDParams' default
    sampled = resolve_params(spec, "kd", {"temperature": 5.0})
    assert (sampled.alpha, sampled.temperature) == (0.9, 5.0)


def test_a_method_the_spec_does_not_set_gets_its_defaults():
    params = resolve_params(spec_from_dict(BASE), "finetune")
    assert params.model_dump()["init_from"] == "finetuned"
