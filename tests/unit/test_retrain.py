"""retrain's building blocks: the per-spec lock and the fingerprints that decide "nothing to do"."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import load_spec
from pipeline.retrain import Locked, fingerprints, spec_lock

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_holder_of_the_lock_is_refused_and_the_lock_is_released(tmp_path):
    with spec_lock(tmp_path):
        with pytest.raises(Locked, match=r"another retrain of this spec is running \(pid \d+"):
            with spec_lock(tmp_path):
                pass
    with spec_lock(tmp_path):  # free again once the first holder left
        pass


def test_fingerprints_change_with_data_and_settings_but_not_with_where_it_runs(tmp_path):
    base = fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml"), tmp_path)
    assert base == fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml"), tmp_path)
    moved = fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml", ["resources.workers_per_trial=2", "tracking.uri=http://x"]), tmp_path)
    assert moved == base
    more_data = fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml", ["task.synthetic.num_train=256"]), tmp_path)
    assert more_data["data"] != base["data"] and more_data["teacher"] != base["teacher"]
    other_lr = fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml", ["train.learning_rate=0.01"]), tmp_path)
    assert other_lr["spec"] != base["spec"] and other_lr["data"] == base["data"] and other_lr["teacher"] == base["teacher"]
