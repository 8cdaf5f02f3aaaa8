"""`Sealed`: a value pickled once where it is made and unpickled only where it is used, so the
processes it passes through (Tune's trial driver) never import what unpickling it imports."""

from __future__ import annotations

import pickle

from pipeline.config import spec_from_dict
from pipeline.search.sealed import Sealed
from tests.unit.search.test_space import TRIAL_SPEC


def test_a_sealed_value_opens_as_the_object_sealed():
    spec = spec_from_dict(TRIAL_SPEC)
    sealed = pickle.loads(pickle.dumps(Sealed(spec)))
    assert sealed.open() == spec and sealed.open() is sealed.open()
    assert pickle.loads(pickle.dumps(sealed)).open() == spec  # travels on unopened
