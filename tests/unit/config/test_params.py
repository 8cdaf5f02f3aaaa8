"""The spec's `methods:` section is typed where it is loaded: each method's parameters are a model
derived from its `Params` (a value or a search domain per parameter), for built-in and
third-party methods alike, and the spec's dump still shows what the user wrote."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest
import yaml
from pydantic import Field, ValidationError

from methods import get_method
from methods.base import MethodParams
from pipeline.config import (
    PARAM_PROBLEMS,
    Choice,
    Domain,
    Grid,
    LogUniform,
    RandInt,
    Uniform,
    param_space_model,
    spec_from_dict,
    spec_to_dict,
)
from pipeline.errors import SpecError
from tests.unit.config.minimal import MINIMAL, problems

BASE = {
    "name": "t",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
}
METHODS = {
    "theseus": {"schedule": "linear", "base_rate": {"choice": [0.1, 0.3]}, "learning_rate": {"loguniform": [1.0e-5, 1.0e-4]}},
    "kd": {"temperature": 2, "alpha": {"grid": [0.5, 1]}, "num_layers": {"randint": [1, 3]}},
}


def test_the_methods_section_is_typed_when_the_spec_is_loaded():
    spec = spec_from_dict({**BASE, "methods": METHODS})
    theseus = spec.methods["theseus"]
    assert type(theseus) is param_space_model(get_method("theseus").Params)
    assert theseus.params_model is get_method("theseus").Params
    assert theseus.base_rate == Choice(choice=[0.1, 0.3]) and theseus.schedule == "linear"
    assert theseus.learning_rate == LogUniform(loguniform=(1.0e-5, 1.0e-4))
    assert theseus.fixed() == {"schedule": "linear"} and list(theseus.domains()) == ["base_rate", "learning_rate"]
    kd = spec.methods["kd"]
    assert kd.alpha == Grid(grid=[0.5, 1]) and kd.num_layers == RandInt(randint=(1, 3)) and kd.temperature == 2
    # the dump is what the user wrote, in the order written (spec.json, the resume check)
    assert spec_to_dict(spec)["methods"] == METHODS
    assert list(spec_to_dict(spec)["methods"]["kd"]) == ["temperature", "alpha", "num_layers"]
    assert spec_from_dict(spec_to_dict(spec)) == spec


def test_a_typed_spec_pickles_and_copies_as_itself():
    """Ray ships the validated spec to the trials as it is: the derived classes pickle by the
    method's Params they come from."""
    spec = spec_from_dict({**BASE, "methods": METHODS})
    for copied in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec)):
        assert copied == spec
        assert type(copied.methods["kd"]) is type(spec.methods["kd"])
        assert list(copied.methods["kd"].given()) == ["temperature", "alpha", "num_layers"]


class ThirdPartyParams(MethodParams):
    """A method outside drydock: its space comes from the same function, nothing written for it."""

    width: int = Field(default=4, gt=0)
    rate: float = Field(default=0.1, ge=0, le=1)


def test_a_third_party_params_model_gets_its_value_or_domain_model():
    space_model = param_space_model(ThirdPartyParams)
    assert param_space_model(ThirdPartyParams) is space_model  # derived once
    assert space_model.model_fields["width"].annotation == int | Domain  # a value or a domain over it
    space = space_model.model_validate({"width": {"grid": [2, 8]}, "rate": {"uniform": [0.1, 0.5]}})
    assert space.width == Grid(grid=[2, 8]) and space.rate == Uniform(uniform=(0.1, 0.5))
    assert space_model.model_validate({"width": 3}).fixed() == {"width": 3}
    with pytest.raises(ValidationError) as info:
        space_model.model_validate({"width": {"grid": [2, 0]}, "rate": {"uniform": [0.5, 2]}})
    found = {err["loc"]: err["ctx"]["lines"] for err in info.value.errors() if err["type"] == PARAM_PROBLEMS}
    assert found == {("width",): ["Input should be greater than 0 (got 0)"], ("rate",): ["Input should be less than or equal to 1 (got 2)"]}


def test_the_spec_names_every_parameter_problem_in_the_order_written():
    with pytest.raises(SpecError) as info:
        spec_from_dict({**BASE, "methods": {"kd": {"temperature": {"uniform": [5, 1]}, "alpah": 0.5, "alpha": 2}}})
    assert info.value.problems[0] == "methods.kd.temperature: uniform needs low < high, got [5, 1]"
    assert info.value.problems[1].startswith("methods.kd.alpah: unknown parameter (known: ")
    assert info.value.problems[2].startswith("methods.kd.alpha: Input should be less than or equal to 1")


THIRD_PARTY = '''
from pydantic import Field

from methods.base import Method, MethodParams


class OutsideParams(MethodParams):
    width: int = Field(default=4, gt=0)
    rate: float = Field(default=0.1, ge=0, le=1)


class Outside(Method):
    name = "outside"
    Params = OutsideParams

    def build(self): ...
    def phases(self, total_steps): ...
    def param_groups(self, phase): ...
    def loss(self, batch, progress): ...
    def eval_model(self): ...
    def export(self): ...
'''


@pytest.fixture
def outside_method(tmp_path, monkeypatch):
    """A method registered through the `drydock.methods` entry point, as a third-party package does."""
    import methods

    (tmp_path / "outside_pkg.py").write_text(THIRD_PARTY)
    monkeypatch.syspath_prepend(str(tmp_path))
    point = EntryPoint("outside", "outside_pkg:Outside", "drydock.methods")
    monkeypatch.setattr(methods, "entry_points", lambda group: [point] if group == "drydock.methods" else [])
    methods._targets.cache_clear()
    get_method.cache_clear()
    yield
    methods._targets.cache_clear()
    get_method.cache_clear()


def test_an_entry_point_method_is_searched_and_refused_like_a_built_in(outside_method):
    from pipeline.search.space import expand_trials

    spec = spec_from_dict({**BASE, "methods": {"outside": {"width": {"grid": [2, 8]}, "rate": 0.5}}})
    assert spec.methods["outside"].width == Grid(grid=[2, 8])
    trials = expand_trials(spec)
    assert [(type(t.params).__name__, t.params.width, t.params.rate) for t in trials] == [("OutsideParams", 2, 0.5),
                                                                                          ("OutsideParams", 8, 0.5)]
    with pytest.raises(SpecError) as info:
        spec_from_dict({**BASE, "methods": {"outside": {"width": {"uniform": [1, 3]}, "rat": 0.5}}})
    assert info.value.problems == [
        "methods.outside.width: uniform draws floats but width takes integers; use randint or grid",
        "methods.outside.rat: unknown parameter (known: width, rate); did you mean rate?",
    ]


def test_method_parameters_are_checked_against_the_method():
    assert problems({**MINIMAL, "methods": {"kd": {"alpah": 0.5}}})[0].startswith("methods.kd.alpah: unknown parameter")
    (line,) = problems({**MINIMAL, "methods": {"kd": {"alpha": {"grid": [0.5, 1.5]}}}})
    assert line.startswith("methods.kd.alpha: ") and "1.5" in line
    assert problems({**MINIMAL, "methods": {"nope": {}}})[0].startswith("methods.nope: unknown method")
    (line,) = problems({**MINIMAL, "methods": {"kd": {"temperature": {"uniform": [5, 1]}}}})
    assert line == "methods.kd.temperature: uniform needs low < high, got [5, 1]"


def test_a_domain_is_checked_by_what_it_draws_not_only_its_bounds():
    kd = lambda **params: {**MINIMAL, "methods": {"kd": params}}
    # integer bounds, but uniform and loguniform draw floats: an integer parameter rejects them
    for kind in ("uniform", "loguniform"):
        assert problems(kd(num_layers={kind: [1, 3]})) == [
            f"methods.kd.num_layers: {kind} draws floats but num_layers takes integers; use randint or grid"
        ]
    assert spec_from_dict(kd(num_layers={"randint": [1, 3]}))
    assert spec_from_dict(kd(temperature={"uniform": [1, 3]}))
    # every grid and choice value is checked, not only the first
    (line,) = problems(kd(num_layers={"grid": [1, 2.5]}))
    assert line.startswith("methods.kd.num_layers: ") and "2.5" in line
    (line,) = problems(kd(init_from={"choice": ["finetuned", "scratch"]}))
    assert line.startswith("methods.kd.init_from: ") and "'scratch'" in line
    # any other type a draw does not fit is named with the draw that fails
    (line,) = problems({**MINIMAL, "methods": {"pkd": {"normalize": {"uniform": [0, 1]}}}})
    assert line.startswith("methods.pkd.normalize: uniform draws values inside the range that normalize rejects: ")


def test_validate_cli_rejects_a_float_range_on_an_integer_without_a_traceback(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(MINIMAL))
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", str(spec), "--set", "methods.kd.num_layers={uniform: [1, 3]}"],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == "error: methods.kd.num_layers: uniform draws floats but num_layers takes integers; use randint or grid"
