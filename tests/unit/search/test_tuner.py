"""ASHA's time axis: the loop reports `progress` (a fraction of labeled training); the spec gives
the grace period in epochs. One function converts, and the rungs land where the spec says."""

from __future__ import annotations

import pytest
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from pipeline.config import spec_from_dict
from pipeline.search.tuner import TIME_ATTR, scheduler

BASE = {
    "name": "t", "task": {"name": "synthetic", "source": "synthetic"},
    "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
    "methods": {"finetune": {}},
}


def rungs(asha: ASHAScheduler) -> list[float]:
    (bracket,) = asha._brackets  # Ray's internals: the milestones at which ASHA compares trials
    return sorted(milestone for milestone, _ in bracket._rungs)


@pytest.mark.parametrize("epochs,grace,reduction,expected", [
    (4, 1, 2.0, [0.25, 0.5, 1.0]),  # one epoch of four: rungs at 1, 2 and 4 epochs
    (2, 1, 2.0, [0.5, 1.0]),
    (3, 5, 2.0, [1.0]),  # a grace period longer than training: nothing is stopped early
    (4, 1, 4.0, [0.25, 1.0]),
])
def test_asha_compares_trials_at_fractions_of_their_labeled_training(epochs, grace, reduction, expected):
    spec = spec_from_dict({**BASE, "train": {"epochs": epochs},
                           "search": {"scheduler": "asha", "asha": {"grace_period": grace, "reduction_factor": reduction}}})
    asha = scheduler(spec, "eval/accuracy")
    assert isinstance(asha, ASHAScheduler)
    assert (asha._time_attr, asha._max_t, asha._metric, asha._mode) == (TIME_ATTR, 1.0, "eval/accuracy", "max")
    assert TIME_ATTR == "progress"  # the key the training loop reports
    assert rungs(asha) == pytest.approx(expected)


def test_fifo_stops_nothing():
    spec = spec_from_dict({**BASE, "search": {"scheduler": "fifo"}})
    assert type(scheduler(spec, "eval/accuracy")) is FIFOScheduler
