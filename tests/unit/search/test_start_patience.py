"""`resources.start_patience_s`: how long a Train run waits for its workers while a cluster scales.

The spec field reaches Ray Train as `RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S` in the environment of
the process that calls `fit()`, which is where Ray reads it to give the run's controller
(docs/stack-facts.md, "worker-start-timeout"); a run that waited in vain ends with one line that
names the field. No Ray cluster is started: the trainer's `fit` is replaced.
`tests/integration/search/test_late_node.py` runs the real thing with a node that joins late.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest
import ray.train
from ray.train.v2._internal.constants import get_env_vars_to_propagate
from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError

from pipeline.config import ResourcesConfig, spec_from_dict
from pipeline.errors import SpecError
from pipeline.search import trainer
from pipeline.search.trainer import (
    CONTROLLER_FAILURE_LIMIT,
    START_ROUND_S,
    START_TIMEOUT_VARIABLE,
    TrainResources,
    WorkersDidNotStart,
    last_line,
    run_train,
)

BASE = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}}, "methods": {"finetune": {}}}


def resources(patience: float | None, workers: int = 2) -> TrainResources:
    return TrainResources(num_workers=workers, use_gpu=True, cpus_per_worker=8.0, gpus_per_worker=1.0, max_failures=1,
                          start_patience_s=patience)


def test_the_spec_waits_half_an_hour_by_default_and_takes_seconds_or_null():
    assert spec_from_dict(BASE).resources.start_patience_s == 1800.0
    assert TrainResources.of(spec_from_dict(BASE)).start_patience_s == 1800.0 == ResourcesConfig().start_patience_s
    assert TrainResources.of(spec_from_dict(BASE, ["resources.start_patience_s=600"])).start_patience_s == 600.0
    assert TrainResources.of(spec_from_dict(BASE, ["resources.start_patience_s=null"])).start_patience_s is None


@pytest.mark.parametrize("value", ["0", "-30", "soon", ".inf"])
def test_the_spec_refuses_a_patience_that_is_not_a_positive_finite_number(value):
    with pytest.raises(SpecError) as info:
        spec_from_dict(BASE, [f"resources.start_patience_s={value}"])
    assert [p.split(":")[0] for p in info.value.problems] == ["resources.start_patience_s"]


@pytest.mark.parametrize(("patience", "per_round", "limit"), [
    (1800.0, 60, 29), (60.0, 60, 3), (61.0, 60, 3), (300.0, 60, 4), (2.0, 2, 3), (0.2, 1, 3), (None, 60, -1),
])
def test_the_patience_is_made_of_rounds_of_a_minute_in_whole_seconds(patience, per_round, limit):
    # Ray truncates its limit to whole seconds (0.5 would be 0: give up at once) and retries a
    # start that timed out up to `controller_failure_limit` times: the patience in rounds of at
    # most a minute, never fewer restarts than other controller failures need
    assert START_ROUND_S == 60 and CONTROLLER_FAILURE_LIMIT == 3
    assert resources(patience).start_timeout_s() == per_round
    assert resources(patience).controller_failure_limit() == limit


def fake_trainer(monkeypatch, error: Exception | None = None) -> list[dict[str, Any]]:
    """Replaces the trainer; each `fit` records what a real one would hand its controller."""
    seen: list[dict[str, Any]] = []

    def build(worker_fn, **kwargs):
        def fit():
            # what Ray's `fit()` copies into the controller's runtime_env env_vars
            seen.append({"controller_env": get_env_vars_to_propagate(), "limit": kwargs["run_config"].failure_config})
            if error is not None:
                raise error

        return SimpleNamespace(fit=fit, **kwargs)

    monkeypatch.setattr(trainer, "lean_torch_trainer", build)
    return seen


def test_the_patience_reaches_the_runs_controller_and_the_process_keeps_its_own_value(monkeypatch):
    seen = fake_trainer(monkeypatch)
    monkeypatch.delenv(START_TIMEOUT_VARIABLE, raising=False)
    assert run_train(print, {}, resources(1800.0), name="n", storage_path="/tmp/x", on_report=lambda _: None) is None
    monkeypatch.setenv(START_TIMEOUT_VARIABLE, "60")  # an operator's value, or Ray's default
    assert run_train(print, {}, resources(None), name="n", storage_path="/tmp/x", on_report=lambda _: None) is None
    assert [s["controller_env"][START_TIMEOUT_VARIABLE] for s in seen] == ["60", "60"]
    assert [s["limit"].controller_failure_limit for s in seen] == [29, -1]
    assert os.environ[START_TIMEOUT_VARIABLE] == "60"
    monkeypatch.delenv(START_TIMEOUT_VARIABLE)
    fake_trainer(monkeypatch, RuntimeError("boom"))
    run_train(print, {}, resources(1800.0), name="n", storage_path="/tmp/x", on_report=lambda _: None)
    assert START_TIMEOUT_VARIABLE not in os.environ  # unset again, after a failed fit too


def test_a_run_that_never_got_its_workers_says_which_field_and_what_it_waited_for(monkeypatch):
    timed_out = ray.train.ControllerError(WorkerGroupStartupTimeoutError(num_workers=2))
    fake_trainer(monkeypatch, timed_out)
    error = run_train(print, {}, resources(1800.0), name="n", storage_path="/tmp/x", on_report=lambda _: None)
    assert isinstance(error, WorkersDidNotStart) and error.__cause__ is timed_out
    line = last_line(error)  # what a trial records and the teacher stage reports
    assert line == str(error)
    assert line.startswith("resources.start_patience_s: the 2 Train worker(s) of this run, {'CPU': 8.0, 'GPU': 1.0} "
                           "each, did not start within 1800 s (Ray Train asked for them 30 times, 60 s each)")


def test_other_controller_errors_are_returned_as_they_are(monkeypatch):
    other = ray.train.ControllerError(RuntimeError("a callback failed"))
    fake_trainer(monkeypatch, other)
    assert run_train(print, {}, resources(1800.0), name="n", storage_path="/tmp/x", on_report=lambda _: None) is other
