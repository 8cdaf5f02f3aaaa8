#!/usr/bin/env python3
"""The sampler settings tried when the searches fell short on the tabular benchmark (issue 34:
"tune the sampler's settings if it falls short, never the table").

`benchmarks/search_efficiency.py replay` runs drydock's samplers as `pipeline.search.study.sampler`
builds them. This replays the same timed table with one change at a time, and prints each
variant's median hypervolume (and best metric) after 20 and 40 configurations beside random
search's, as benchmarks/RESULTS.md's tuning table shows them:

    .venv/bin/python benchmarks/search_tuning.py --table TIMED --algorithms motpe random \
        --settings '{"n_startup_trials": 5}' '{"n_startup_trials": 5, "multivariate": false, "group": false}'
    .venv/bin/python benchmarks/search_tuning.py --table TIMED --algorithms motpe random --depth ordinal

`--settings`: keyword arguments given to TPE's (or NSGA-II's) sampler over drydock's own;
`gamma_fraction` stands for `gamma = min(ceil(fraction × n), 25)` (Optuna 5.1 warns that `gamma`
is deprecated). The settings go to every model-based algorithm named: one kind at a time. `--depth shared`: the methods'
`num_layers` one study parameter, not one per method; `--depth ordinal`: the table's depths a
`randint` domain, not a grid (categorical).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import search_efficiency as bench  # noqa: E402

from pipeline.config import SweepSpec, spec_from_dict  # noqa: E402
from pipeline.search import joint_space, study  # noqa: E402

DRYDOCK_SAMPLER = study.sampler
TABLE_SPEC = bench.replay_spec  # the grid spec of the table, before --depth ordinal replaces it


def tuned_sampler(settings: dict[str, Any]):
    """`study.sampler` with `settings` over drydock's own for TPE and MOTPE, or for NSGA-II: the
    same settings go to each model-based algorithm of `--algorithms`, so name one kind at a time."""
    def sampler(algorithm: str, seed: int, budget: int) -> optuna.samplers.BaseSampler:
        base = DRYDOCK_SAMPLER(algorithm, seed, budget)
        if isinstance(base, optuna.samplers.TPESampler):
            extra = dict(settings)
            fraction = extra.pop("gamma_fraction", None)
            if fraction is not None:
                extra["gamma"] = lambda n: min(math.ceil(fraction * n), 25)
            own = {"multivariate": base._parzen_estimator_parameters.multivariate, "group": base._group,
                   "constant_liar": base._constant_liar, "n_startup_trials": base._n_startup_trials}
            return optuna.samplers.TPESampler(**{"seed": seed, **own, **extra})
        if isinstance(base, optuna.samplers.NSGAIISampler):
            own = {"population_size": base.population_size, "mutation_prob": base._child_generation_strategy._mutation_prob}
            return optuna.samplers.NSGAIISampler(**{"seed": seed, **own, **settings})
        return base
    return sampler


@contextmanager
def depth_encoding(depth: str) -> Iterator[None]:
    """The student's depth as the study sees it while inside: one parameter per method (drydock's),
    one `num_layers` shared by every method (`shared`), or an ordered integer (`ordinal`)."""
    param_name, table_spec = joint_space.param_name, bench.replay_spec
    if depth == "shared":
        joint_space.param_name = lambda method, name: name if name == "num_layers" else param_name(method, name)
    if depth == "ordinal":
        bench.replay_spec = ordinal_spec
    try:
        yield
    finally:  # drydock's own again, for whatever imported this
        joint_space.param_name, bench.replay_spec = param_name, table_spec


def ordinal_spec(table: pd.DataFrame, algorithm: str, budget: int, seed: int) -> SweepSpec:
    """`search_efficiency.replay_spec` with each method's depths a `randint` domain."""
    raw = TABLE_SPEC(table, algorithm, budget, seed).model_dump(mode="json", exclude_unset=True)
    for params in raw["methods"].values():
        if "num_layers" in params:
            depths = params["num_layers"]["grid"]
            params["num_layers"] = {"randint": [min(depths), max(depths) + 1]}
    return spec_from_dict(raw)


def measure(table: pd.DataFrame, algorithms: list[str], repeats: int) -> dict[str, tuple[float, float, float]]:
    runs = pd.DataFrame([r for a in algorithms for seed in range(repeats) for r in bench.replay(table, a, seed)])
    at = bench.summarize(runs, (20, 40)).set_index(["algorithm", "budget"])
    return {a: (float(at.loc[(a, 20), "hypervolume"]), float(at.loc[(a, 40), "hypervolume"]),
                float(at.loc[(a, 20), "best_metric"])) for a in algorithms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, required=True, help="a timed table (search_efficiency.py time)")
    parser.add_argument("--algorithms", nargs="+", default=["motpe", "random"], choices=bench.ALGORITHMS)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--settings", nargs="*", default=["{}"], help="JSON objects, one variant each")
    parser.add_argument("--depth", choices=("per-method", "shared", "ordinal"), default="per-method")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    table = pd.read_parquet(args.table)
    with depth_encoding(args.depth):
        try:
            for text in args.settings:
                study.sampler = tuned_sampler(json.loads(text))
                found = measure(table, args.algorithms, args.repeats)
                print(f"{text} depth {args.depth}, {args.repeats} searches: " + "; ".join(
                    f"{a} hypervolume after 20 {hv20:.2f}, after 40 {hv40:.2f}, best metric after 20 {best:.4f}"
                    for a, (hv20, hv40, best) in found.items()), flush=True)
        finally:
            study.sampler = DRYDOCK_SAMPLER
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
