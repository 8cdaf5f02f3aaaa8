"""The walk of one Theseus `base_rate` from the spec to the method (docs/layout.md, "One
parameter's way"), hop by hop, without Ray: the spec is typed where it is loaded, the trial is
built once where the configurations are drawn, Tune's grid copies it, the driver forwards it, Train
pickles the worker's config, the worker hands the parameters to the trial, and the method receives
its own `Params`. Validation is counted on the way: the spec once at load, each configuration once
where it is drawn, nothing after."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import cloudpickle
from ray import tune
from ray.tune.search.variant_generator import generate_variants

from methods import get_method
from methods.base import MethodContext, TaskInfo
from pipeline.config import Grid, SweepSpec, spec_from_dict
from pipeline.errors import DrydockError
from pipeline.search import driver, worker
from pipeline.search.driver import SearchContext
from pipeline.search.outcome import read_outcome
from pipeline.search.sealed import Sealed
from pipeline.search.space import Trial, expand_trials
from pipeline.search.trainer import TrainResources
from pipeline.training import trial as trial_module
from pipeline.training.engine import Distributed

SPEC = {
    "name": "walk",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "seeds": [0, 1],
    "methods": {"theseus": {"schedule": "linear", "base_rate": {"grid": [0.1, 0.3]}}},
}


class Counting:
    """A pydantic model's validator that counts every validation of the model (model_validate,
    the constructor, a validating copy): pickling and copying a model never call it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not name.startswith("validate_"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return attr(*args, **kwargs)

        return counted


def counting(monkeypatch, model: type) -> Counting:
    counter = Counting(model.__pydantic_validator__)
    monkeypatch.setattr(model, "__pydantic_validator__", counter)
    return counter


def test_a_theseus_base_rate_reaches_the_method_as_its_params_validated_once_where_drawn(monkeypatch, tmp_path):
    params_model = get_method("theseus").Params
    specs, params_checks = counting(monkeypatch, SweepSpec), counting(monkeypatch, params_model)

    # hop 1: the spec, typed where it is loaded; base_rate is a typed domain
    spec = spec_from_dict(SPEC)
    assert specs.calls == 1 and spec.methods["theseus"].base_rate == Grid(grid=[0.1, 0.3])
    specs.calls = params_checks.calls = 0  # the load's checks of the domain's values are the spec's

    # hop 2: the trials, built once where the configurations are drawn, each validated once
    trials = expand_trials(spec)
    assert all(type(t) is Trial and type(t.params) is params_model for t in trials)
    assert params_checks.calls == 2 and len(trials) == 4  # two configurations, each run with two seeds

    # hop 3: Tune's grid over the trials (its variant generator copies them into each config)
    configs = [config for _, config in generate_variants({"trial": tune.grid_search(trials)})]
    assert [c["trial"] for c in configs] == trials and all(type(c["trial"]) is Trial for c in configs)

    # hop 4: the driver forwards the trial and the sealed spec into the Train worker's config,
    # which Train pickles to each worker; hop 5: the worker hands the parameters to the trial;
    # hop 6: the trial creates the method with them, and the loop receives that method
    received: dict[str, Any] = {}

    def run_train(worker_fn: Any, config: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        received["config"] = config
        worker.train_worker(cloudpickle.loads(cloudpickle.dumps(config)))  # as Train ships it

    def loop_run(method: Any, **kwargs: Any) -> None:
        received["method"] = method
        raise DrydockError("the walk ends where training would start")

    def method_context(spec: SweepSpec, prepared: Any, teacher: Any, learning_rate: float | None) -> MethodContext:
        received["spec"] = spec
        return MethodContext(TaskInfo("sst2", 2, False), teacher, lambda: None)

    data = SimpleNamespace(train=None, dev=None, task=None, fingerprint="f")
    monkeypatch.setattr(driver, "run_train", run_train)
    monkeypatch.setattr(driver.tune, "report", lambda metrics: None)
    monkeypatch.setattr(driver.ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "node"))
    monkeypatch.setattr(worker.ray.train, "get_context", lambda: SimpleNamespace(get_world_rank=lambda: 0, get_world_size=lambda: 1))
    monkeypatch.setattr(worker, "_distributed", lambda resources, preset, world, rank, in_actor=False: Distributed())
    monkeypatch.setattr(worker, "fetch_inputs", lambda store, config, spec: SimpleNamespace(data=data, pad_id=0))
    monkeypatch.setattr(worker, "_teacher", lambda store, ref: SimpleNamespace(load=lambda: None, key="k"))
    monkeypatch.setattr(trial_module, "method_context", method_context)
    monkeypatch.setattr(trial_module.loop, "run", loop_run)
    context = SearchContext(spec=Sealed(spec), resources=TrainResources.of(spec), workdir=str(tmp_path), trials_dir="trials",
                            train_storage=str(tmp_path / "train"), teacher={"path": "", "metrics": {}, "key": "k"},
                            prepared={}, metric_key="eval/accuracy", deepspeed_preset=None)
    trial = configs[3]["trial"]
    driver.trial_driver(cloudpickle.loads(cloudpickle.dumps(configs[3])), cloudpickle.loads(cloudpickle.dumps(context)))
    assert type(received["config"]["trial"]) is Trial and type(received["config"]["spec"]) is Sealed
    assert received["spec"] == spec  # the worker opened the spec the sweep validated
    method = received["method"]
    assert type(method).name == "theseus" and type(method.params) is params_model
    assert method.params == trial.params and method.params.base_rate == trial.params.base_rate
    assert read_outcome(tmp_path / "trials" / trial.key)["error"] == "the walk ends where training would start"

    # nothing on the way validated the spec or the parameters again
    assert specs.calls == 0 and params_checks.calls == 2
