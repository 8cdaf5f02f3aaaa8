"""The one place a TorchTrainer is built: the spec's resources and kept checkpoints, bounded
retries, reports relayed while `fit()` blocks, and no Ray Data actor. No Ray cluster is started:
the trainer's `fit` is replaced where a run would start one. Reports reach Tune through a file the
Train controller appends to, not through an actor of their own."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import ray.train

from pipeline.config import spec_from_dict
from pipeline.search import trainer
from pipeline.search.trainer import (
    CONTROLLER_FAILURE_LIMIT,
    ReportRelay,
    TrainResources,
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
