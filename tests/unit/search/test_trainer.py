"""The one place a TorchTrainer is built: the spec's resources and kept checkpoints, bounded
retries, reports relayed while `fit()` blocks, and no Ray Data actor. No Ray cluster is started:
the trainer's `fit` is replaced where a run would start one. Reports reach Tune through a file the
Train controller appends to, not through an actor of their own.

`resources.start_patience_s`, how long a Train run waits for its workers while a cluster scales,
reaches Ray Train as `RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S` in the environment of the process
that calls `fit()`, which is where Ray reads it to give the run's controller
(docs/stack-facts.md, "worker-start-timeout"); a run that waited in vain ends with one line that
names the field. `tests/integration/search/test_late_node.py` runs the real thing with a node that
joins late."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
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
    ReportRelay,
    TrainResources,
    WorkersDidNotStart,
    forward_reports,
    last_line,
    lean_torch_trainer,
    relayed_reports,
    run_train,
)

BASE = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}}, "methods": {"finetune": {}}}


def test_train_resources_come_from_the_validated_spec():
    spec = spec_from_dict({**BASE, "resources": {"workers_per_trial": 2, "cpus_per_worker": 3, "use_gpu": True, "gpus_per_worker": 2},
                           "search": {"max_failures": 4}})
    resources = TrainResources.of(spec)
    assert resources == TrainResources(num_workers=2, use_gpu=True, cpus_per_worker=3.0, gpus_per_worker=2.0, max_failures=4)
    assert resources.per_worker() == {"CPU": 3.0, "GPU": 2.0}
    assert TrainResources.of(spec_from_dict(BASE)).per_worker() == {"CPU": 1.0}  # no GPU asked for, none reserved


def fake_trainers(monkeypatch, error: Exception | None = None) -> list[SimpleNamespace]:
    built: list[SimpleNamespace] = []

    def build(worker_fn, **kwargs):
        def fit():
            kwargs["run_config"].callbacks[0].after_report(None, [{"step": 8, "eval/accuracy": 0.5}], None)
            if error is not None:
                raise error

        made = SimpleNamespace(worker_fn=worker_fn, fit=fit, **kwargs)
        built.append(made)
        return made

    monkeypatch.setattr(trainer, "lean_torch_trainer", build)
    return built


def test_run_train_builds_one_trainer_from_the_resources_and_relays_its_reports(monkeypatch):
    built = fake_trainers(monkeypatch)
    got: list[dict] = []
    resources = TrainResources(num_workers=2, use_gpu=False, cpus_per_worker=2.0, gpus_per_worker=1.0, max_failures=3)
    assert run_train(print, {"a": 1}, resources, name="train-kd-1-s0", storage_path="/tmp/x", on_report=got.append) is None
    (made,) = built
    assert made.worker_fn is print and made.train_loop_config == {"a": 1}
    scaling: ray.train.ScalingConfig = made.scaling_config
    assert (scaling.num_workers, scaling.use_gpu, scaling.resources_per_worker) == (2, False, {"CPU": 2.0})
    run = made.run_config
    assert (run.name, run.storage_path, run.checkpoint_config.num_to_keep) == ("train-kd-1-s0", "/tmp/x", 1)
    # the default patience, 1800 s, in rounds of a minute: 30 requests, so 29 restarts (never fewer than the limit)
    assert (run.failure_config.max_failures, run.failure_config.controller_failure_limit) == (3, 29)
    assert 29 > CONTROLLER_FAILURE_LIMIT
    assert [type(c) for c in run.callbacks] == [ReportRelay]
    assert got == [{"step": 8, "eval/accuracy": 0.5}]  # delivered before run_train returned


def test_run_train_returns_what_fit_raised_after_delivering_the_reports(monkeypatch):
    fake_trainers(monkeypatch, RuntimeError("Training failed.\nTraceback ...\nValueError: 9 layers do not fit"))
    got: list[dict] = []
    resources = TrainResources(num_workers=1, use_gpu=False, cpus_per_worker=1.0, gpus_per_worker=1.0, max_failures=0)
    error = run_train(print, {}, resources, name="n", storage_path="/tmp/x", on_report=got.append)
    assert isinstance(error, RuntimeError) and last_line(error) == "ValueError: 9 layers do not fit"
    assert got == [{"step": 8, "eval/accuracy": 0.5}]
    assert last_line(RuntimeError()) == ""


def test_a_trainer_without_datasets_starts_no_ray_data_actor_and_keeps_the_rest():
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import (
        PlacementGroupCleanerCallback,
    )

    def kinds(made):
        return {type(c) for c in made._create_default_callbacks()}

    scaling = ray.train.ScalingConfig(num_workers=1)
    plain = ray.train.torch.TorchTrainer(lambda: None, scaling_config=scaling)
    lean = lean_torch_trainer(lambda: None, scaling_config=scaling)
    assert DatasetsCallback in kinds(plain)  # what Ray does on its own, and why this exists
    assert kinds(lean) == kinds(plain) - {DatasetsCallback}
    assert PlacementGroupCleanerCallback in kinds(lean)  # ASHA's stopped trials need it

    # A dataset factory (Train calls it in the controller): a Dataset itself would start Ray here.
    with_data = lean_torch_trainer(lambda: None, scaling_config=scaling, datasets={"train": lambda: None})
    assert DatasetsCallback in kinds(with_data)
    assert not ray.is_initialized()


def test_train_keeps_the_specs_number_of_checkpoints(monkeypatch):
    spec = spec_from_dict(BASE, ["train.keep_checkpoints=3"])
    assert TrainResources.of(spec).keep_checkpoints == 3
    assert TrainResources.of(spec_from_dict(BASE)).keep_checkpoints == 1
    built = fake_trainers(monkeypatch)
    run_train(print, {}, TrainResources.of(spec), name="n", storage_path="/tmp/x", on_report=lambda _: None)
    (made,) = built
    config: ray.train.CheckpointConfig = made.run_config.checkpoint_config
    # no score attribute: Train keeps the latest ones in the order they were reported
    assert (config.num_to_keep, config.checkpoint_score_attribute) == (3, None)


def _forward_in_thread(path):
    got, done = [], threading.Event()
    thread = threading.Thread(target=forward_reports, args=(path, got.append, done), daemon=True)
    thread.start()
    return got, done, thread


def test_reports_reach_tune_in_order_and_a_partial_line_waits_for_its_end(tmp_path):
    path = tmp_path / "reports.jsonl"
    got, done, thread = _forward_in_thread(path)  # the file does not exist yet: nothing, no error
    time.sleep(0.3)
    assert got == []
    with open(path, "a") as f:
        f.write(json.dumps({"step": 1, "eval/loss": 0.5}) + "\n" + '{"step": 2, "eval/lo')
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # several more looks: the half-written record must still be held back
    assert got == [{"step": 1, "eval/loss": 0.5}]
    with open(path, "a") as f:
        f.write('ss": NaN}\n' + json.dumps({"step": 3, "eval/loss": 0.25}) + "\n")
    done.set()  # written before the run ended: both must still be delivered
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert [r["step"] for r in got] == [1, 2, 3]
    assert math.isnan(got[1]["eval/loss"]) and got[2]["eval/loss"] == 0.25


def test_the_relay_writes_rank_zeros_metrics_and_the_checkpoint_path(tmp_path):
    relay = ReportRelay(tmp_path / "reports.jsonl")
    relay.after_report(None, [{"eval/accuracy": 0.75, "step": 10}, {"eval/accuracy": 0.0, "step": 10}], None)
    relay.after_report(None, [{"eval/accuracy": 0.8, "step": 20}, {"eval/accuracy": 0.0, "step": 20}],
                       SimpleNamespace(path="/ckpt/checkpoint_000001"))
    records = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert records == [
        {"eval/accuracy": 0.75, "step": 10},
        {"eval/accuracy": 0.8, "step": 20, "checkpoint_path": "/ckpt/checkpoint_000001"},
    ]


def test_relayed_reports_delivers_every_record_before_it_returns_and_cleans_up():
    got = []
    with relayed_reports(got.append) as relay:
        relay.after_report(None, [{"step": 8, "eval/accuracy": 0.5}], None)
        relay.after_report(None, [{"step": 16, "eval/accuracy": 0.75}], None)  # just before the end
        folder = Path(relay.path).parent
        assert folder.is_dir()
    assert got == [{"step": 8, "eval/accuracy": 0.5}, {"step": 16, "eval/accuracy": 0.75}]
    assert not folder.exists()


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
