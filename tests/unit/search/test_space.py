"""From search domains to trials: what `drydock validate` accepts, `expand_trials` can expand."""

from __future__ import annotations

import pytest

from methods import get_method, registered_methods
from pipeline.config import spec_from_dict
from pipeline.errors import SpecError
from pipeline.search.space import expand_trials

BASE = {
    "name": "t",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "search": {"num_samples": 5},
}


def kd(**params) -> dict:
    return {**BASE, "methods": {"kd": params}}


def test_an_integer_parameter_is_searched_with_randint_not_uniform():
    trials = expand_trials(spec_from_dict(kd(num_layers={"randint": [1, 4]}, temperature={"uniform": [1, 3]})))
    assert {t.params.num_layers for t in trials} <= {1, 2, 3}
    assert all(isinstance(t.params.num_layers, int) for t in trials)
    assert all(1 <= t.params.temperature <= 3 for t in trials)
    # uniform would reach expand_trials with floats like 2.69 and fail there, mid-sweep
    for kind in ("uniform", "loguniform"):
        with pytest.raises(SpecError, match=f"methods.kd.num_layers: {kind} draws floats"):
            spec_from_dict(kd(num_layers={kind: [1, 3]}))


DOMAINS = [
    {"uniform": [1, 3]},
    {"uniform": [0.1, 0.9]},
    {"loguniform": [1, 8]},
    {"loguniform": [1e-5, 1e-3]},
    {"randint": [1, 4]},
    {"grid": [1, 2.5]},
    {"choice": [0, 1]},
    {"choice": ["on", "off"]},
    {"grid": ["linear", "piecewise", "constant"]},
]
FIELDS = [(m, f) for m in registered_methods() for f in get_method(m).Params.model_fields]


@pytest.mark.parametrize("method,field", FIELDS, ids=[f"{m}.{f}" for m, f in FIELDS])
def test_a_domain_that_validates_expands(method, field):
    """Every domain on every parameter: validation names the method, or every draw is valid."""
    for domain in DOMAINS:
        try:
            spec = spec_from_dict({**BASE, "methods": {method: {field: domain}}})
        except SpecError as e:
            assert all(p.startswith(f"methods.{method}") for p in e.problems), e.problems
            continue
        trials = expand_trials(spec)
        assert trials and all(t.method == method for t in trials), domain


def test_parameters_that_fail_together_are_a_validation_error():
    lines = lambda method, params: _problems({**BASE, "methods": {method: params}})
    assert lines("theseus", {"slope": 0.1, "replacing_steps": 10}) == ["methods.theseus: give either slope or replacing_steps, not both"]
    assert lines("cofi", {"distill_warmup_fraction": {"grid": [0.2, 0.8]}, "pruning_fraction": 0.5}) == [
        "methods.cofi: distill_warmup_fraction + pruning_fraction must not exceed 1 (with distill_warmup_fraction=0.8)"
    ]
    # a range is checked at its bounds: its upper end would break the sum
    (line,) = lines("cofi", {"distill_warmup_fraction": {"uniform": [0.1, 0.9]}, "pruning_fraction": 0.5})
    assert line.startswith("methods.cofi: distill_warmup_fraction + pruning_fraction must not exceed 1")
    assert expand_trials(spec_from_dict({**BASE, "methods": {"cofi": {"distill_warmup_fraction": {"uniform": [0.1, 0.4]}, "pruning_fraction": 0.5}}}))


def test_a_draw_that_fails_inside_its_range_is_a_spec_error_not_a_traceback(monkeypatch):
    """validate checks a range at its bounds; should a draw inside still fail, the sweep says so."""
    spec = spec_from_dict({**BASE, "methods": {"cofi": {"distill_warmup_fraction": {"uniform": [0.1, 0.4]}}}})
    monkeypatch.setattr("pipeline.config.Uniform.sample", lambda self, rng: 0.95)  # the draw moved into the domain type
    with pytest.raises(SpecError) as info:
        expand_trials(spec)
    assert info.value.problems == [
        "methods.cofi: distill_warmup_fraction + pruning_fraction must not exceed 1 (with distill_warmup_fraction=0.95)"
    ]


def _problems(raw: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(raw)
    return info.value.problems
