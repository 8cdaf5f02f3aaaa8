"""A trial is built once, where the configurations are drawn, and travels as it is: Tune, the
trial's driver and its Train workers pass the same `Trial` on, and its parameters stay the
method's own `Params` (sealed on the way, so the driver and Train's controller never import the
method to unpickle them)."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
from pathlib import Path

from methods import get_method
from pipeline.config import spec_from_dict
from pipeline.search.sealed import Sealed
from pipeline.search.space import as_trial, expand_trials, key_of

ROOT = Path(__file__).resolve().parents[3]
SPEC = {
    "name": "t",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "seeds": [0, 1],
    "methods": {"theseus": {"base_rate": {"grid": [0.1, 0.3]}}},
}


def test_a_trial_holds_its_methods_params_and_keeps_them_through_pickle_and_copy():
    trials = expand_trials(spec_from_dict(SPEC))
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
    trial = expand_trials(spec_from_dict(SPEC))[0]
    legacy = {"method": trial.method, "params": trial.params.model_dump(mode="json"), "seed": trial.seed,
              "config_id": trial.config_id}
    assert key_of(legacy) == key_of(trial) == trial.key
    assert as_trial(legacy) == trial and as_trial(trial) is trial


def test_unpickling_a_trial_and_the_sealed_spec_leaves_the_model_stack_unloaded(tmp_path):
    """What the trial's driver does with its config and its `SearchContext`: unpickle, read the key."""
    spec = spec_from_dict(SPEC)
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

