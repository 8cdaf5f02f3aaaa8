"""The orchestrator's promises that need no Ray: an empty sweep is refused before any work, and
a run started before the recorder moved still resumes (its pickled callback's name resolves)."""

from __future__ import annotations

import io
import pickle

import pytest

from pipeline.config import spec_from_dict
from pipeline.errors import DrydockError
from pipeline.search.recorder import stand_in_callback
from pipeline.sweep import run_sweep

BASE = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}}}


def test_a_spec_without_methods_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(DrydockError, match="methods: the spec lists no method to run"):
        run_sweep(spec_from_dict({**BASE, "methods": {}}), tmp_path / "work", log=lambda line: None)
    assert not (tmp_path / "work" / "t").exists()


def test_the_callback_name_older_runs_pickled_still_unpickles():
    assert pickle.Unpickler(io.BytesIO()).find_class("pipeline.sweep", "_stand_in_callback") is stand_in_callback
