"""From search domains to trials: what `drydock validate` accepts, `expand_trials` can expand."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from methods import get_method, registered_methods
from pipeline.config import spec_from_dict
from pipeline.errors import SpecError
from pipeline.search.sealed import Sealed
from pipeline.search.space import as_trial, expand_trials, key_of

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


# A trial is built once, where the configurations are drawn, and travels as it is: Tune, the
# trial's driver and its Train workers pass the same `Trial` on, and its parameters stay the
# method's own `Params` (sealed on the way, so the driver and Train's controller never import the
# method to unpickle them).

ROOT = Path(__file__).resolve().parents[3]
TRIAL_SPEC = {
    "name": "t",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "seeds": [0, 1],
    "methods": {"theseus": {"base_rate": {"grid": [0.1, 0.3]}}},
}


def test_a_trial_holds_its_methods_params_and_keeps_them_through_pickle_and_copy():
    trials = expand_trials(spec_from_dict(TRIAL_SPEC))
    assert [t.key for t in trials] == [f"theseus-{t.config_id}-s{t.seed}" for t in trials] and len(trials) == 4
    params_model = get_method("theseus").Params
    for trial in trials:
        assert type(trial.params) is params_model
        for travelled in (pickle.loads(pickle.dumps(trial)), copy.deepcopy(trial)):
            assert travelled == trial and travelled.key == trial.key
            assert type(travelled.params) is params_model and travelled.params == trial.params
    assert sorted({t.params.base_rate for t in trials}) == [0.1, 0.3]
    assert str(trials[0]) == trials[0].key  # what Tune names the trial's folder after


def test_a_trial_of_a_sweep_started_before_typed_trials_is_read_once_into_its_params():
    trial = expand_trials(spec_from_dict(TRIAL_SPEC))[0]
    legacy = {"method": trial.method, "params": trial.params.model_dump(mode="json"), "seed": trial.seed,
              "config_id": trial.config_id}
    assert key_of(legacy) == key_of(trial) == trial.key
    assert as_trial(legacy) == trial and as_trial(trial) is trial


def test_unpickling_a_trial_and_the_sealed_spec_leaves_the_model_stack_unloaded(tmp_path):
    """What the trial's driver does with its config and its `SearchContext`: unpickle, read the key."""
    spec = spec_from_dict(TRIAL_SPEC)
    trial = expand_trials(spec)[0]
    (tmp_path / "parcel.pkl").write_bytes(pickle.dumps({"trial": trial, "spec": Sealed(spec)}))
    code = (
        "import json, pickle, sys; "
        f"parcel = pickle.loads(open({str(tmp_path / 'parcel.pkl')!r}, 'rb').read()); "
        "from pipeline.search.space import key_of; "
        "print(json.dumps({'key': key_of(parcel['trial']), "
        "'loaded': [m for m in ('transformers', 'methods', 'torch') if m in sys.modules]}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"key": trial.key, "loaded": []}

