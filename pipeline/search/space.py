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
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from pipeline.config import Grid, ParamSpace, Sampled, SweepSpec, param_error
from pipeline.errors import SpecError


@dataclass(frozen=True)
class TrialSpec:
    method: str
    params: dict[str, Any]  # every parameter of the method, validated, defaults filled in
    seed: int
    config_id: str  # same for every seed of one configuration

    @property
    def key(self) -> str:
        """Stable across runs and restores: names the trial's folder, Train run and MLflow run."""
        return f"{self.method}-{self.config_id}-s{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "params": self.params, "seed": self.seed, "config_id": self.config_id}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TrialSpec:
        return TrialSpec(d["method"], dict(d["params"]), int(d["seed"]), d["config_id"])


def config_id(method: str, params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([method, params], sort_keys=True, default=str).encode()).hexdigest()[:8]


def method_configurations(method: str, space: ParamSpace, num_samples: int, rng: random.Random) -> list[dict[str, Any]]:
    """Grid points × samples of the random domains, each validated into a full parameter set."""
    fixed = space.fixed()
    grids = {k: d.grid for k, d in space.domains().items() if isinstance(d, Grid)}
    randoms = {k: d for k, d in space.domains().items() if not isinstance(d, Grid)}
    model = space.params_model
    configs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for combo in itertools.product(*grids.values()) if grids else [()]:
        point = {**fixed, **dict(zip(grids, combo))}
        for _ in range(num_samples if randoms else 1):
            drawn = {k: cast(Sampled, d).sample(rng) for k, d in randoms.items()}
            try:
                full = model.model_validate({**point, **drawn}).model_dump(mode="json")
            except ValidationError as e:  # validate_methods checks the bounds; a draw inside may still fail
                searched = ", ".join(f"{k}={v!r}" for k, v in {**dict(zip(grids, combo)), **drawn}.items())
                raise SpecError([
                    f"{'.'.join(['methods', method, *map(str, err['loc'])])}: {param_error(err)} (with {searched})"
                    for err in e.errors()
                ]) from None
            ident = json.dumps(full, sort_keys=True)
            if ident not in seen:
                seen.add(ident)
                configs.append(full)
    return configs


def expand_trials(spec: SweepSpec) -> list[TrialSpec]:
    rng = random.Random(spec.search.sample_seed)
    trials: list[TrialSpec] = []
    for method in spec.methods:  # spec order: the user's order is the table's order
        for params in method_configurations(method, spec.methods[method], spec.search.num_samples, rng):
            cid = config_id(method, params)
            trials.extend(TrialSpec(method, params, seed, cid) for seed in spec.seeds)
    return trials
