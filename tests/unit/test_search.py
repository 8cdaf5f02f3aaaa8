"""From search domains to trials: what `drydock validate` accepts, `expand_trials` can expand."""

from __future__ import annotations

import pytest

from pipeline.config import spec_from_dict
from pipeline.errors import SpecError
from pipeline.search import expand_trials

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
    assert {t.params["num_layers"] for t in trials} <= {1, 2, 3}
    assert all(isinstance(t.params["num_layers"], int) for t in trials)
    assert all(1 <= t.params["temperature"] <= 3 for t in trials)
    # uniform would reach expand_trials with floats like 2.69 and fail there, mid-sweep
    for kind in ("uniform", "loguniform"):
        with pytest.raises(SpecError, match=f"methods.kd.num_layers: {kind} draws floats"):
            spec_from_dict(kd(num_layers={kind: [1, 3]}))
