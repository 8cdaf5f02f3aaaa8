"""Selection: pure functions over the results table (no I/O, no MLflow, no timing).

A *configuration* is a method plus every `params.*` value; its seeds are repetitions. One seed
can be lucky, so every decision here is taken on the seed mean of a configuration, never on a
single trial:

- `aggregate` — one row per configuration: n, mean and std of the metric over seeds, mean
  latency, speedup and size, the best seed (whose export the registry gets) with that export's
  own latency and speedup, and a label that shows only what tells the configuration apart
  (`label_params`). Only
  *finished* trials count: a failed trial has no student, and a trial ASHA stopped was cut
  short, so its metric says how fast it learned rather than where it ended.
- `served_trials` / `latency_plan` — which seed's export the registry serves for each
  configuration (the best metric: `aggregate`'s `best_trial_id`, decided by the metric alone,
  so it is known before anything is timed), and so which exports the select stage times: by
  default only those (`selection.latency.all_seeds: true` times every finished trial). The
  other seeds keep empty latency columns rather than a copy of the served seed's figures:
  CoFi's seeds prune to different shapes, so a copied figure could describe a model that was
  never timed. A configuration's `latency_ms`, `latency_p90_ms` and `speedup` are means over
  its *timed* seeds (`latency_n` of its `n`): by default the served export's own figures, so the
  front places each configuration at the speed of the model a consumer would load.
- `select` — the Pareto front on (mean metric ↑, latency ↓) [, num_params ↓]
  (`pipeline.select.front.front_mask`: a latency here is a point, so this is plain Pareto
  dominance and exact ties all stay). A configuration without a latency is not a candidate.
- results.parquet's `pareto` column: True on every finished seed row of a Pareto
  configuration (timed or not: the mark belongs to the configuration), False on the other
  candidate configurations' rows, and **null where a row was not a candidate** (failed or
  stopped trials, rows without a metric, rows of a configuration without a latency) — "not on
  the front" and "never considered" are different answers.
- `paired_comparisons` — each method's best configuration against every other's, paired by
  seed over the seeds they share (the seed fixes data order and initialisation, so pairing
  removes that shared noise): mean difference and a percentile bootstrap 95% interval. With the
  handful of seeds a sweep affords, the interval is rough; it is there to stop a 0.2-point
  "win" from being read as one.
- the champion is chosen on the front by `pipeline.select.champion`, the one place that reads the
  latency budget; the front itself keeps the seed means.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from pipeline.config import SelectionConfig
from pipeline.results import flatten
from pipeline.select.front import CONFIGS, SIZED_CONFIGS, choose_champion, front_mask
from pipeline.select.front import candidates as front_candidates

PARAM_PREFIX = "params."


# ----------------------------------------------------------------------------------------------
# configurations
# ----------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """numpy scalars → Python, null → None: keys and tags must not depend on pandas dtypes."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)  # an int column turns float64 beside another method's nulls
    return value


def row_params(row: pd.Series) -> dict[str, Any]:
    """A trial's parameters; a null column belongs to another method and is not one of them."""
    out = {}
    for column, value in row.items():
        if str(column).startswith(PARAM_PREFIX):
            plain = _plain(value)
            if plain is not None:
                out[str(column)[len(PARAM_PREFIX):]] = plain
    return out


def config_key(method: str, params: dict[str, Any]) -> str:
    return json.dumps([method, params], sort_keys=True, default=str)


def config_label(method: str, params: dict[str, Any]) -> str:
    """Short and readable: `kd alpha=0.5 temperature=2`."""
    shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))
    return f"{method} {shown}".strip()


@cache
def method_defaults(method: str) -> dict[str, Any] | None:
    """A method's parameter defaults as results.parquet stores them; None where the method is
    not installed here (its labels then list every parameter)."""
    from methods import get_declaration

    try:
        fields = get_declaration(method).Params.model_fields
    except (KeyError, ImportError, TypeError):
        return None
    defaults = flatten({k: f.get_default(call_default_factory=True) for k, f in fields.items()}, PARAM_PREFIX)
    return {column[len(PARAM_PREFIX):]: _plain(v) for column, v in defaults.items()}


def label_params(method: str, params: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parameters a label shows for each of one method's configurations: those that differ
    between its configurations, and those set away from the method's default. A trial records
    every parameter (CoFi has 16), and a label listing them all is unreadable; the full set stays
    in the `params` column, the registry's `params` tag and MLflow. Labels stay unique: two
    configurations differ in some parameter, which is then shown on both."""
    defaults = method_defaults(method)
    keys = set().union(*params) if params else set()
    varying = {k for k in keys if len({json.dumps(_plain(p.get(k)), sort_keys=True, default=str) for p in params}) > 1}

    def shown(k: str, v: Any) -> bool:
        return defaults is None or k in varying or k not in defaults or defaults[k] != _plain(v)

    return [{k: v for k, v in p.items() if shown(k, v)} for p in params]


def candidates(frame: pd.DataFrame) -> pd.Series:
    """Rows that take part in selection: finished, with a metric."""
    if not len(frame):
        return pd.Series([], dtype=bool)
    return (frame["status"].astype("string") == "finished").fillna(False).astype(bool) & frame["metric"].notna()


def _configurations(frame: pd.DataFrame) -> pd.DataFrame:
    """The candidate rows, each with its `params` and `config_key`."""
    rows = frame[candidates(frame)].copy()
    params = [row_params(r) for _, r in rows.iterrows()]
    rows["params"] = pd.Series(params, index=rows.index, dtype=object)
    rows["config_key"] = pd.Series([config_key(m, p) for m, p in zip(rows["method"].astype(str), params)],
                                   index=rows.index, dtype=object)
    return rows


def served_row(group: pd.DataFrame) -> pd.Series:
    """The seed of one configuration whose export the registry gets: the best metric (the first
    such row on a tie). One function, so what is timed and what is registered cannot drift apart."""
    # pandas-stubs types idxmax's label as Hashable, which none of .loc's overloads takes
    return group.loc[group["metric"].astype("float64").idxmax()]  # type: ignore[call-overload]


def served_trials(frame: pd.DataFrame) -> dict[str, str]:
    """config_key → trial_id of the export the registry would serve for that configuration."""
    rows = _configurations(frame)
    return {str(key): str(served_row(group)["trial_id"]) for key, group in rows.groupby("config_key", sort=False)}


def served_by(frame: pd.DataFrame) -> dict[str, str]:
    """trial_id → the trial_id its configuration serves, for every candidate row."""
    rows = _configurations(frame)
    served = served_trials(frame)
    return {str(t): served[k] for t, k in zip(rows["trial_id"], rows["config_key"])}


def latency_plan(frame: pd.DataFrame, all_seeds: bool) -> list[str]:
    """The trial_ids whose exports the select stage times: each configuration's served seed, or,
    with `all_seeds`, every finished trial (as before the choice existed; trials without a metric
    are timed too but are no candidates). See the module docstring for what the others get."""
    if not all_seeds:
        return list(served_trials(frame).values())
    if not len(frame):
        return []
    finished = (frame["status"].astype("string") == "finished").fillna(False).astype(bool)
    return [str(t) for t in frame.loc[finished, "trial_id"]]


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration over its finished seeds (see the module docstring)."""
    columns = ["config_key", "config", "method", "params", "n", "seeds", "metric_name", "metric_mean", "metric_std",
               "retention_mean", "num_params", "num_params_encoder", "latency_ms", "latency_p90_ms", "speedup",
               "latency_n", "best_trial_id", "best_seed", "best_metric", "best_latency_ms", "best_latency_p90_ms",
               "best_speedup", "best_student_path", "best_run_id"]
    rows = _configurations(frame)
    if not len(rows):
        return pd.DataFrame(columns=columns)
    labels: dict[str, str] = {}
    for method, group in rows.drop_duplicates("config_key").groupby(rows["method"].astype(str), sort=False):
        for key, shown in zip(group["config_key"], label_params(method, list(group["params"]))):
            labels[key] = config_label(method, shown)
    out = []
    for key, group in rows.groupby("config_key", sort=False):
        best = served_row(group)
        metric = group["metric"].astype("float64")
        out.append({
            "config_key": key,
            "config": labels[str(key)],
            "method": str(best["method"]),
            "params": best["params"],
            "n": len(group),
            "seeds": tuple(int(s) for s in group["seed"].dropna()),
            "metric_name": _plain(best.get("metric_name")),
            "metric_mean": float(metric.mean()),
            "metric_std": float(metric.std(ddof=1)) if len(group) > 1 else math.nan,  # undefined for one seed
            "retention_mean": _mean(group, "retention"),
            "num_params": _mean(group, "num_params"),
            "num_params_encoder": _mean(group, "num_params_encoder"),
            "latency_ms": _mean(group, "latency_ms"),
            "latency_p90_ms": _mean(group, "latency_p90_ms"),
            "speedup": _mean(group, "speedup"),
            "latency_n": int(pd.to_numeric(group["latency_ms"], errors="coerce").notna().sum()) if "latency_ms" in group else 0,
            "best_trial_id": str(best["trial_id"]),
            "best_seed": _plain(best["seed"]),
            "best_metric": float(best["metric"]),
            "best_latency_ms": _value(best, "latency_ms"),  # the export the registry gets, as measured
            "best_latency_p90_ms": _value(best, "latency_p90_ms"),
            "best_speedup": _value(best, "speedup"),
            "best_student_path": _plain(best.get("student_path")),
            "best_run_id": _plain(best.get("mlflow_run_id")),
        })
    return pd.DataFrame(out, columns=columns)


def _value(row: pd.Series, column: str) -> float:
    value = _plain(row.get(column))
    return math.nan if value is None else float(value)


def _mean(group: pd.DataFrame, column: str) -> float:
    """Mean of the seeds that have the value (CoFi's seeds prune to different sizes and speeds)."""
    if column not in group:
        return math.nan
    values = pd.to_numeric(group[column], errors="coerce").astype("float64").dropna()
    return float(values.mean()) if len(values) else math.nan


# ----------------------------------------------------------------------------------------------
# the Pareto front
# ----------------------------------------------------------------------------------------------


@dataclass
class Selection:
    frame: pd.DataFrame  # the results table with `pareto` filled
    configs: pd.DataFrame  # `aggregate` plus `pareto` and `champion` columns
    champion: pd.Series | None
    comparisons: pd.DataFrame

    @property
    def front(self) -> pd.DataFrame:
        return self.configs[self.configs["pareto"]].sort_values("latency_ms", kind="stable")


def select(frame: pd.DataFrame, selection: SelectionConfig, bootstrap_seed: int = 0) -> Selection:
    """Aggregate, mark the front on configurations and on trial rows, pick the champion."""
    configs = aggregate(frame)
    sized = selection.size_objective
    marks = front_mask(front_candidates(configs, SIZED_CONFIGS if sized else CONFIGS), size_objective=sized)
    configs["pareto"] = pd.Series(marks, index=configs.index, dtype=bool)
    champion = choose_champion(configs[configs["pareto"]], selection, CONFIGS)  # only the front is registered
    configs["champion"] = configs["config_key"] == (champion["config_key"] if champion is not None else None)
    return Selection(
        frame=mark_pareto(frame, configs),
        configs=configs,
        champion=champion,
        comparisons=paired_comparisons(frame, configs, seed=bootstrap_seed),
    )


def mark_pareto(frame: pd.DataFrame, configs: pd.DataFrame) -> pd.DataFrame:
    """The `pareto` column of results.parquet (True / False / null: see the module docstring)."""
    frame = frame.copy()
    marks = pd.Series(pd.NA, index=frame.index, dtype="boolean")
    if len(configs):
        on_front = set(configs.loc[configs["pareto"], "config_key"])
        timed = set(configs.loc[configs["latency_ms"].notna(), "config_key"])  # the candidates of the front
        rows = _configurations(frame)
        keys = rows.loc[rows["config_key"].isin(timed), "config_key"]
        marks.loc[keys.index] = keys.isin(on_front).to_numpy()
    frame["pareto"] = marks
    return frame


# ----------------------------------------------------------------------------------------------
# paired comparisons between methods
# ----------------------------------------------------------------------------------------------


def bootstrap_mean_ci(differences: np.ndarray, seed: int = 0, n_resamples: int = 9999, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of paired differences; the interval is NaN for fewer than two pairs,
    where resampling has nothing to vary."""
    differences = np.asarray(differences, dtype=np.float64)
    mean = float(differences.mean()) if len(differences) else math.nan
    if len(differences) < 2:
        return mean, math.nan, math.nan
    result = stats.bootstrap(
        (differences,), np.mean, n_resamples=n_resamples, confidence_level=level, method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = sorted((float(result.confidence_interval.low), float(result.confidence_interval.high)))
    return mean, min(low, mean), max(high, mean)  # rounding can leave a constant's ends a hair off


def best_per_method(configs: pd.DataFrame) -> pd.DataFrame:
    """Each method's best configuration: the highest seed mean, ties to the faster."""
    if not len(configs):
        return configs
    return configs.sort_values(["metric_mean", "latency_ms"], ascending=[False, True], kind="stable").drop_duplicates("method")


def paired_comparisons(frame: pd.DataFrame, configs: pd.DataFrame, seed: int = 0, n_resamples: int = 9999) -> pd.DataFrame:
    """Every pair of methods, each by its best configuration (highest seed mean), better first."""
    columns = ["method_a", "config_a", "method_b", "config_b", "n_pairs", "seeds", "mean_diff", "ci_low", "ci_high"]
    if not len(configs):
        return pd.DataFrame(columns=columns)
    best = best_per_method(configs).reset_index(drop=True)
    rows = frame[candidates(frame)]
    keys = pd.Series([config_key(str(r["method"]), row_params(r)) for _, r in rows.iterrows()], index=rows.index, dtype=object)
    by_seed = {
        key: dict(zip(rows.loc[keys == key, "seed"].astype(int), rows.loc[keys == key, "metric"].astype("float64")))
        for key in best["config_key"]
    }
    out = []
    for i in range(len(best)):
        for j in range(i + 1, len(best)):
            a, b = best.iloc[i], best.iloc[j]
            shared = sorted(set(by_seed[a["config_key"]]) & set(by_seed[b["config_key"]]))
            diffs = np.array([by_seed[a["config_key"]][s] - by_seed[b["config_key"]][s] for s in shared])
            mean, low, high = bootstrap_mean_ci(diffs, seed=seed, n_resamples=n_resamples)
            out.append({"method_a": a["method"], "config_a": a["config"], "method_b": b["method"], "config_b": b["config"],
                        "n_pairs": len(shared), "seeds": tuple(shared), "mean_diff": mean, "ci_low": low, "ci_high": high})
    return pd.DataFrame(out, columns=columns)
