"""From the spec's search domains to the concrete list of trials.

We draw the configurations ourselves instead of handing Tune the random domains, because a
`seed` grid beside random domains makes Tune re-sample every random value per seed
(docs/search-on-ray.md): those rows would not be one configuration over several seeds and could
not be averaged or paired. Here, per method: every grid combination ×
`num_samples` seeded draws of the random domains = the configurations; each runs once per seed.
Tune then grids over this fixed list, so one Tuner schedules every method together and a
restored sweep sees exactly the same trials.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from pipeline.config import Grid, ParamSpace, Sampled, SweepSpec, param_error
from pipeline.errors import SpecError
from pipeline.search.sealed import Sealed
from pipeline.workdir import trial_key

if TYPE_CHECKING:  # at run time the driver imports this module, which must not load torch (methods.base does)
    from methods.declaration import MethodParams


class Trial:
    """One trial: a method, its parameters (the method's own `Params`, validated once where the
    configuration is drawn), a seed, and the configuration it belongs to. Built here and handed as
    it is to Tune, the trial's driver, its Train workers and the method. The parameters travel
    sealed (`pipeline.search.sealed`): the driver reads only the key."""

    __slots__ = ("config_id", "method", "order", "seed", "_params")

    def __init__(self, method: str, params: MethodParams, seed: int, config_id: str, *, order: int | None = None) -> None:
        self.method = method
        self.seed = seed
        self.config_id = config_id  # same for every seed of one configuration
        self.order = order  # the configuration's place in the order of suggestion (1 first; grid: list order)
        self._params = Sealed(params)

    @property
    def params(self) -> MethodParams:
        return self._params.open()

    @property
    def key(self) -> str:
        """Stable across runs and restores: names the trial's folder, Train run and MLflow run."""
        return trial_key(self.method, self.config_id, self.seed)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_travelled, (self.method, self._params, self.seed, self.config_id, self.order))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trial) and (self.key, self.params) == (other.key, other.params)

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:  # what Tune names the trial's folder after
        return self.key

    def __repr__(self) -> str:
        return f"Trial({self.method!r}, {self.params!r}, {self.seed}, {self.config_id!r})"


def _travelled(method: str, params: Sealed[MethodParams], seed: int, config_id: str, order: int | None = None) -> Trial:
    """A pickled Trial (one pickled before trials had an order has none)."""
    trial = Trial.__new__(Trial)
    trial.method, trial._params, trial.seed, trial.config_id, trial.order = method, params, seed, config_id, order
    return trial


def key_of(trial: Trial | Mapping[str, Any]) -> str:
    """The key of the trial a Tune config holds, without opening its parameters (see `as_trial`)."""
    if isinstance(trial, Trial):
        return trial.key
    return trial_key(trial["method"], trial["config_id"], int(trial["seed"]))


def as_trial(trial: Trial | Mapping[str, Any]) -> Trial:
    """The trial a Tune config holds. A sweep started before trials were typed holds plain dicts
    (`{"method", "params", "seed", "config_id"}`) in its restored Tune state; resumed, each is
    validated here, once, into its method's Params."""
    if isinstance(trial, Trial):
        return trial
    from methods import get_declaration

    params = get_declaration(trial["method"]).Params.model_validate(trial["params"])
    return Trial(trial["method"], params, int(trial["seed"]), trial["config_id"])


def config_id(method: str, params: MethodParams) -> str:
    """The configuration's id: a hash of its parameters' JSON dump, every default included (ids
    of a run started earlier stay valid: `--resume` and the results table depend on them)."""
    dumped = params.model_dump(mode="json")
    return hashlib.sha256(json.dumps([method, dumped], sort_keys=True, default=str).encode()).hexdigest()[:8]


def validated_params(method: str, model: type[MethodParams], values: dict[str, Any], searched: dict[str, Any]) -> MethodParams:
    """One configuration validated into its method's Params; a SpecError names the searched values
    when a value inside the spec's bounds still fails (the spec checked the bounds: `ParamSpace`)."""
    try:
        return model.model_validate(values)
    except ValidationError as e:
        given = ", ".join(f"{k}={v!r}" for k, v in searched.items())
        raise SpecError([
            f"{'.'.join(['methods', method, *map(str, err['loc'])])}: {param_error(err)} (with {given})"
            for err in e.errors()
        ]) from None


def method_configurations(method: str, space: ParamSpace, num_samples: int, rng: random.Random) -> list[MethodParams]:
    """Grid points × samples of the random domains, each validated into the method's Params."""
    fixed = space.fixed()
    grids = {k: d.grid for k, d in space.domains().items() if isinstance(d, Grid)}
    randoms = {k: d for k, d in space.domains().items() if not isinstance(d, Grid)}
    model = cast("type[MethodParams]", space.params_model)
    configs: list[MethodParams] = []
    seen: set[str] = set()
    for combo in itertools.product(*grids.values()) if grids else [()]:
        point = {**fixed, **dict(zip(grids, combo))}
        for _ in range(num_samples if randoms else 1):
            drawn = {k: cast(Sampled, d).sample(rng) for k, d in randoms.items()}
            params = validated_params(method, model, {**point, **drawn}, {**dict(zip(grids, combo)), **drawn})
            ident = json.dumps(params.model_dump(mode="json"), sort_keys=True)
            if ident not in seen:
                seen.add(ident)
                configs.append(params)
    return configs


def expand_trials(spec: SweepSpec) -> list[Trial]:
    rng = random.Random(spec.search.sample_seed)
    trials: list[Trial] = []
    order = 0
    for method in spec.methods:  # spec order: the user's order is the table's order
        for params in method_configurations(method, spec.methods[method], spec.search.num_samples, rng):
            cid, order = config_id(method, params), order + 1
            trials.extend(Trial(method, params, seed, cid, order=order) for seed in spec.seeds)
    return trials
