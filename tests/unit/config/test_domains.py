"""The search domains: each checks its own shape, says which values validate it, and draws inside
what it says."""

from __future__ import annotations

import random
import re

import pytest
from pydantic import ValidationError

from pipeline.config import Choice, Grid, LogUniform, RandInt, Uniform, default_params, domain_candidates, domain_draw


def test_each_domain_type_checks_its_own_shape():
    for raw, message in [
        ({"grid": []}, "grid needs a non-empty list"),
        ({"uniform": [5, 1]}, "uniform needs low < high, got [5, 1]"),
        ({"loguniform": [0, 1]}, "loguniform needs a positive low bound"),
        ({"randint": [1.5, 3]}, "randint needs integer bounds"),
        ({"choice": "ab"}, "choice needs a non-empty list"),
    ]:
        kind = next(iter(raw))
        model = {"grid": Grid, "uniform": Uniform, "loguniform": LogUniform, "randint": RandInt, "choice": Choice}[kind]
        with pytest.raises(ValidationError, match=re.escape(message)):
            model.model_validate(raw)


def test_each_random_domain_draws_inside_what_it_says():
    rng = random.Random(0)
    assert all(1 <= RandInt(randint=(1, 3)).sample(rng) <= 2 for _ in range(50))
    assert all(1e-5 <= LogUniform(loguniform=(1e-5, 1e-4)).sample(rng) <= 1e-4 for _ in range(50))
    assert {Choice(choice=["a", "b"]).sample(rng) for _ in range(50)} == {"a", "b"}


def test_domains():
    assert domain_candidates({"grid": [1, 2]}) == [1, 2]
    assert domain_candidates({"loguniform": [1e-5, 1e-4]}) == [1e-5, 1e-4]
    assert domain_candidates({"randint": [2, 5]}) == [2, 4]
    draw = domain_draw({"uniform": [1, 3]})
    assert 1 < draw < 3 and not draw.is_integer()
    draw = domain_draw({"loguniform": [1, 100]})
    assert 1 < draw < 100 and not draw.is_integer()
    assert domain_draw({"randint": [2, 5]}) is None and domain_draw({"grid": [1.5]}) is None
    assert default_params({"alpha": {"grid": [0.1]}, "temperature": 3.0}) == {"temperature": 3.0}
