#!/usr/bin/env python3
"""How many configurations each `search.algorithm` needs to find the front: a tabular benchmark.

The field measures searchers on a table of every configuration's result, and so does this script.

The table (parquet, one row per configuration of a grid sweep over a joint space with every seed
run): `config_id` (`pipeline.search.space.config_id`), `method`, `params` (JSON of the study's
parameters, `{"method": ..., "<method>.<param>": ...}`), `seed_metrics` (the metric per seed, in
the spec's seed order), `metric` (their mean), `latency_ms` (what the search sees,
`pipeline.search.search_latency`: the student timed once per architecture in eager fp32 and
ONNX Runtime int8, the quickstart's `selection.runtimes`, the faster of the two),
`latency_by_runtime` (JSON, each runtime's p50), and the references `teacher_metric`,
`teacher_latency_ms` (eager fp32: the hypervolume's reference and every speedup's denominator in
the report), `teacher_int8_ms` (the teacher's own ONNX Runtime int8 export: what a user gets
without compressing) and `majority_metric`. Making it is hours of CPU (≥ 100 configurations × 2
seeds, `drydock sweep` on a grid spec, resumable with `--resume`); `collect` turns the finished
sweep into the table.

`replay` runs each algorithm over the table through the searcher a sweep uses
(`pipeline.search.searcher.ConfigurationSearcher`), the trial replaced by a lookup of its seed's
metric, `--repeats` times (search seeds), and reports per algorithm and budget (10, 20, 40
configurations) the median and interquartile range of the found front's hypervolume (reference:
the teacher's latency and the majority-class metric) and of the best seed-mean metric, and the
fastest configuration found within 1 point of the teacher with its speedup over the teacher's
own int8 export; then the issue's two bars (the multi-objective algorithms' median hypervolume
after 20 against random's after 40; TPE's median best metric after 20 against random's after
40). `--plot` draws the median hypervolume after each configuration, with its interquartile band.
Minutes.

    .venv/bin/python benchmarks/search_efficiency.py collect --spec SPEC --sweep-dir <workdir>/<name> \
        --teacher <fine-tuned teacher folder> --majority-metric M --out TABLE
    .venv/bin/python benchmarks/search_efficiency.py replay --table TABLE [--repeats 30] [--out runs.parquet] \
        [--plot hypervolume.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import results as results_table  # noqa: E402
from pipeline.config import LatencyConfig, SweepSpec, load_spec, spec_from_dict  # noqa: E402
from pipeline.config.checks import distinct_configurations  # noqa: E402
from pipeline.measure.runtimes import EAGER, ORT_INT8  # noqa: E402
from pipeline.search.joint_space import METHOD  # noqa: E402
from pipeline.search.search_latency import SearchLatency, architecture  # noqa: E402
from pipeline.search.searcher import ConfigurationSearcher, hypervolume  # noqa: E402
from pipeline.search.space import Trial  # noqa: E402
from pipeline.storage import WorkStore  # noqa: E402
from pipeline.workdir import RESULTS_FILE, config_id_of  # noqa: E402

ALGORITHMS = ("random", "tpe", "motpe", "nsga2")
MULTI_OBJECTIVE = ("motpe", "nsga2")
BUDGETS = (10, 20, 40)
RUNTIMES = (EAGER, ORT_INT8)  # the quickstart's selection.runtimes: the search's latency is the fastest
METRIC = "eval/metric"


def collect(spec: SweepSpec, sweep_dir: Path, teacher: Path, majority_metric: float,
            settings: LatencyConfig | None = None, runtimes: tuple[str, ...] = RUNTIMES) -> pd.DataFrame:
    """The table of a finished grid sweep: one row per configuration every seed of which finished,
    its student timed once per architecture at the selection's front shape in every runtime (the
    search's engine), and the teacher timed the same way."""
    frame = results_table.read_results(sweep_dir / RESULTS_FILE)
    frame = frame[frame["status"] == "finished"].copy()
    frame["config_id"] = [config_id_of(key, m) for key, m in zip(frame["trial_id"], frame["method"], strict=True)]
    timer = SearchLatency(WorkStore.open(sweep_dir.parent), "", settings or spec.selection.latency, runtimes=runtimes)

    def timed(folder: Path) -> tuple[float, dict[str, float]]:
        fastest = timer.of_folder(folder)
        shape = architecture(folder)
        return fastest, {r: timer.by_runtime[(shape, r)] for r in runtimes if (shape, r) in timer.by_runtime}

    _, teacher_times = timed(teacher)
    references = {"teacher_latency_ms": teacher_times[EAGER], "teacher_int8_ms": teacher_times.get(ORT_INT8, np.nan),
                  "majority_metric": majority_metric}
    rows = []
    for cid, group in frame.groupby("config_id", sort=False):
        by_seed = group.set_index("seed")
        if sorted(by_seed.index) != sorted(spec.seeds):
            continue  # a configuration with a seed missing cannot be averaged like the others
        method = str(group["method"].iloc[0])
        first = by_seed.loc[spec.seeds[0]]
        params = {"method": method, **{f"{method}.{name}": _plain(first[f"params.{name}"])
                                       for name in spec.methods[method].domains()}}
        seed_metrics = [float(by_seed.loc[seed, "metric"]) for seed in spec.seeds]
        latency, by_runtime = timed(Path(str(first["student_path"])))  # the first seed's export, as the search
        rows.append({"config_id": cid, "method": method, "params": json.dumps(params), "seed_metrics": seed_metrics,
                     "metric": float(np.mean(seed_metrics)), "latency_ms": latency,
                     "latency_by_runtime": json.dumps(by_runtime),
                     "teacher_metric": float(group["teacher_metric"].iloc[0]), **references})
    return pd.DataFrame(rows)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def replay_spec(table: pd.DataFrame, algorithm: str, budget: int, seed: int) -> SweepSpec:
    """The joint space the table covers: every searched parameter a grid of the values it holds."""
    methods: dict[str, dict[str, Any]] = {}
    for method, rows in table.groupby("method", sort=False):
        params = [json.loads(p) for p in rows["params"]]
        names = sorted({k for p in params for k in p if k != METHOD})
        methods[str(method)] = {k.split(".", 1)[1]: {"grid": sorted({json.dumps(p[k]) for p in params}, key=str)} for k in names}
        for spec_params in methods[str(method)].values():
            spec_params["grid"] = [json.loads(v) for v in spec_params["grid"]]
    seeds = len(table["seed_metrics"].iloc[0])
    return spec_from_dict({
        "name": "replay", "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/unused"},
        "teacher": {"model": "bert-base-uncased"}, "seeds": list(range(seeds)), "methods": methods,
        "search": {"algorithm": algorithm, "num_configurations": budget, "sample_seed": seed,
                   **({"objectives": ["metric", "latency"]} if algorithm == "random" else {})},
    })


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [p for p in points if not any(q[0] >= p[0] and q[1] <= p[1] and q != p for q in points)]


def replay(table: pd.DataFrame, algorithm: str, seed: int, budget: int = max(BUDGETS)) -> list[dict[str, Any]]:
    """One search over the table: per budget, the found front's hypervolume, best metric and the
    fastest configuration within 1 point of the teacher."""
    # a space smaller than the budget is searched whole: the later budgets' rows then repeat its front
    held = int(distinct_configurations(replay_spec(table, algorithm, 1, seed)))
    spec = replay_spec(table, algorithm, min(budget, held), seed)
    by_key = {_key(json.loads(p)): i for i, p in enumerate(table["params"])}  # the study's parameters → row

    def row(trial: Trial) -> pd.Series | None:
        """The table's row of a suggested configuration; None for a grid point the table lacks (a
        configuration of the collected sweep with a seed missing): it is told failed."""
        searched = {name: getattr(trial.params, name) for name in spec.methods[trial.method].domains()}
        index = by_key.get(_key({METHOD: trial.method, **{f"{trial.method}.{k}": v for k, v in searched.items()}}))
        return None if index is None else table.iloc[index]

    with tempfile.TemporaryDirectory() as tmp:
        searcher = ConfigurationSearcher(spec, METRIC, str(Path(tmp) / "study.journal"),
                                         latency=lambda trial: float(row(trial)["latency_ms"]))  # type: ignore[index]
        for i in range(spec.search.num_configurations * len(spec.seeds)):
            handed = searcher.suggest(f"r{i}")
            if not isinstance(handed, dict):
                break
            found = row(handed["trial"])
            value = float(found["seed_metrics"][handed["trial"].seed]) if found is not None else float("nan")
            searcher.on_trial_complete(f"r{i}", {"drydock_final": 1.0, METRIC: value})
        told = [row(c.trial) for c in searcher.told() if c.told == "complete"]
    by_id = pd.DataFrame([r for r in told if r is not None])
    ref = (float(table["majority_metric"].iloc[0]), float(table["teacher_latency_ms"].iloc[0]))
    teacher_metric = float(table["teacher_metric"].iloc[0])
    teacher_int8 = float(table["teacher_int8_ms"].iloc[0]) if "teacher_int8_ms" in table else np.nan
    rows = []
    for k in range(1, budget + 1):  # after each configuration told: the plot's curve; the summary reads BUDGETS
        found = by_id.iloc[:k] if len(by_id) else pd.DataFrame(columns=["metric", "latency_ms", "params"])
        points = list(zip(found["metric"], found["latency_ms"], strict=True))
        close = found[found["metric"] >= teacher_metric - 0.01]
        fastest = close.loc[close["latency_ms"].idxmin()] if len(close) else None
        rows.append({"algorithm": algorithm, "seed": seed, "budget": k, "hypervolume": hypervolume(front(points), ref),
                     "best_metric": float(found["metric"].max()) if len(found) else np.nan,
                     "fastest_close_ms": float(fastest["latency_ms"]) if fastest is not None else np.nan,
                     "fastest_close": str(fastest["params"]) if fastest is not None else None,
                     "fastest_close_vs_teacher_int8": teacher_int8 / float(fastest["latency_ms"]) if fastest is not None else np.nan})
    return rows


def summarize(runs: pd.DataFrame, budgets: tuple[int, ...] = BUDGETS) -> pd.DataFrame:
    """Median and interquartile range per algorithm and budget; the fastest configuration within 1
    point of the teacher that most searches found, and how many found one."""
    def iqr(s: pd.Series) -> str:
        return f"{s.quantile(0.25):.4g}-{s.quantile(0.75):.4g}"

    def most_found(s: pd.Series) -> str | None:
        found = s.dropna()
        return str(found.mode().iloc[0]) if len(found) else None

    grouped = runs[runs["budget"].isin(budgets)].groupby(["algorithm", "budget"], sort=False)
    return grouped.agg(hypervolume=("hypervolume", "median"), hypervolume_iqr=("hypervolume", iqr),
                       best_metric=("best_metric", "median"), best_metric_iqr=("best_metric", iqr),
                       found_close=("fastest_close_ms", "count"), searches=("seed", "count"),
                       fastest_close_ms=("fastest_close_ms", "median"),
                       vs_teacher_int8=("fastest_close_vs_teacher_int8", "median"),
                       fastest_close=("fastest_close", most_found)).reset_index()


def verdicts(summary: pd.DataFrame) -> list[str]:
    """The issue's two bars, as lines: each multi-objective algorithm's median hypervolume after 20
    configurations against random search's after 40, and TPE's median best metric after 20 against
    random's after 40."""
    at = summary.set_index(["algorithm", "budget"])
    lines = []

    def bar(algorithm: str, column: str) -> None:
        if (algorithm, 20) in at.index and ("random", 40) in at.index:
            mine, theirs = float(at.loc[(algorithm, 20), column]), float(at.loc[("random", 40), column])
            verdict = "meets" if mine >= theirs else "misses"
            lines.append(f"{algorithm} after 20: median {column} {mine:.4g}; random after 40: {theirs:.4g} ({verdict} the bar)")

    for algorithm in MULTI_OBJECTIVE:
        bar(algorithm, "hypervolume")
    bar("tpe", "best_metric")
    return lines


def plot(runs: pd.DataFrame, path: Path) -> None:
    """The median hypervolume after each configuration told, per algorithm, with its interquartile band."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for algorithm, rows in runs.groupby("algorithm", sort=False):
        by_k = rows.groupby("budget")["hypervolume"]
        k = by_k.median().index
        ax.plot(k, by_k.median(), label=str(algorithm))
        ax.fill_between(k, by_k.quantile(0.25), by_k.quantile(0.75), alpha=0.2)
    ax.set_xlabel("configurations told")
    ax.set_ylabel("hypervolume of the found front")
    ax.set_title(f"median and interquartile range over {runs['seed'].nunique()} searches", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    col = sub.add_parser("collect", help="the table of a finished grid sweep")
    col.add_argument("--spec", type=Path, required=True)
    col.add_argument("--sweep-dir", type=Path, required=True, help="<workdir>/<sweep name>")
    col.add_argument("--teacher", type=Path, required=True, help="the sweep's fine-tuned teacher folder")
    col.add_argument("--majority-metric", type=float, required=True, help="the metric of always answering the dev set's majority class")
    col.add_argument("--out", type=Path, required=True)
    rep = sub.add_parser("replay", help="replay each algorithm over a collected table")
    rep.add_argument("--table", type=Path, required=True)
    rep.add_argument("--repeats", type=int, default=30)
    rep.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    rep.add_argument("--out", type=Path, help="write every run's row here (parquet)")
    rep.add_argument("--plot", type=Path, help="draw the hypervolume curves here (png)")
    args = parser.parse_args(argv)
    if args.command == "collect":
        table = collect(load_spec(args.spec), args.sweep_dir, args.teacher, args.majority_metric)
        table.to_parquet(args.out, index=False)
        print(f"{len(table)} configurations, each with every seed finished, written to {args.out}")
        return 0
    table = pd.read_parquet(args.table)
    runs = pd.DataFrame([row for algorithm in args.algorithms for seed in range(args.repeats)
                         for row in replay(table, algorithm, seed)])
    if args.out:
        runs.to_parquet(args.out, index=False)
    if args.plot:
        plot(runs, args.plot)
    summary = summarize(runs)
    print(f"{len(table)} configurations in the table; {args.repeats} searches per algorithm")
    with pd.option_context("display.max_colwidth", 80, "display.width", 250):
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("\n".join(verdicts(summary)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
