"""How many trials run at once, from the cluster's resources (`pipeline.search.ray_instance.max_concurrent`)."""

from __future__ import annotations

import pytest

from pipeline.config import load_spec
from pipeline.errors import DrydockError
from pipeline.search.ray_instance import DRIVER_MEMORY, max_concurrent
from tests.integration.search.test_sweep import SMOKE

GIB = 2**30


def test_trials_at_once_are_what_the_cpus_and_the_drivers_memory_both_hold():
    spec = load_spec(SMOKE)  # 1 worker of 1 CPU a trial
    assert max_concurrent(spec, resources={"CPU": 4.0, "memory": 16 * GIB}) == 4
    said: list[str] = []
    assert max_concurrent(spec, said.append, resources={"CPU": 4.0, "memory": 2.5 * DRIVER_MEMORY}) == 2
    assert said == ["search: the Ray cluster's memory (2.5 GiB) holds 2 trial driver(s) of 1 GiB, fewer than its CPUs hold (4)"]


def test_a_cluster_whose_memory_holds_no_trial_driver_is_refused_before_any_work():
    """Tune would wait for ever to place the first driver, and say nothing (Ray's log is quieted)."""
    with pytest.raises(DrydockError, match=r"^resources: a trial's driver reserves 1 GiB of memory, but the Ray cluster "
                                           r"offers 0.50 GiB"):
        max_concurrent(load_spec(SMOKE), resources={"CPU": 4.0, "memory": 0.5 * GIB})
