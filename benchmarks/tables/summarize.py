"""Print the 3-seed method tables of benchmarks/RESULTS.md from a `run.sh` workdir.

    python benchmarks/tables/summarize.py WORKDIR            # the 3-layer students (issues 4, 5)
    python benchmarks/tables/summarize.py WORKDIR --cofi     # CoFi's sweeps, table-cofi* (issue 6)

Reads every `<WORKDIR>/table-*/results.parquet` (the results contract, pipeline/results.py) and, for
the learning curves, each trial's `eval/<metric>` history from the workdir's MLflow store.

- mean ± std: over the seeds of one configuration (sample std, n − 1).
- steps to 95%: the first evaluation at which the dev metric reached 95% of the trial's final
  (last) evaluation, in optimizer steps on the labeled data (MiniLM's distillation steps are not
  counted: its first trial distils for the others), mean over seeds.
- paired differences: per seed, this configuration's metric minus the reference's on the same
  seed (same data order and initialisation); mean and a Student-t 95% interval over the seeds.
  With 3 seeds t(0.975, 2) = 4.30: the interval is wide, and honest about it. (The select
  stage's report uses a percentile bootstrap, which over 3 pairs can only return their range.)
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

PARAM_LABELS = {
    "kd": lambda p: f"kd α={p['alpha']:g} T={p['temperature']:g}",
    "pkd": lambda p: f"pkd α={p['alpha']:g} T={p['temperature']:g} β={p['beta']:g} {p['layer_map']}",
    "theseus": lambda p: {
        "linear": f"theseus linear curriculum b={p['base_rate']:g}, p=1 at {p['replacing_fraction']:g}",
        "constant": f"theseus constant p={p['base_rate']:g} for {p['replacing_fraction']:g}, then successors",
        "anti_curriculum": f"theseus anti-curriculum from {1 - p['base_rate']:g} over {p['replacing_fraction']:g}, then successors",
    }[p["schedule"]],
    "dcr": lambda p: f"dcr {p['schedule']} {p['gate']}, DFG λ={p['dfg_weight']:g}",
    "minilm": lambda p: f"minilm (distilled once on {int(p['unlabeled_samples']):,} texts)",
    "finetune": lambda p: "finetune (teacher's bottom layers)",
}


def params_of(row: pd.Series) -> dict:
    return {k[len("params."):]: v for k, v in row.items() if k.startswith("params.") and v is not None and not (isinstance(v, float) and math.isnan(v))}


def label(row: pd.Series) -> str:
    make = PARAM_LABELS.get(row["method"])
    params = params_of(row)
    try:
        text = make(params) if make else row["method"]
    except KeyError:
        text = row["method"]
    if params.get("learning_rate") is not None:  # a method's own rate, instead of train.learning_rate
        text += f", lr {float(params['learning_rate']):g}"
    return text


def curves(workdir: Path, run_ids: list[str], key: str) -> dict[str, list[tuple[int, float]]]:
    """Each run's (step, value) history of the MLflow metric `key`."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    return {r: sorted((m.step, m.value) for m in client.get_metric_history(r, key)) for r in run_ids if r}


def steps_to(curve: list[tuple[int, float]], fraction: float, offset: int) -> float:
    if not curve:
        return math.nan
    final = curve[-1][1]
    return next(step - offset for step, value in curve if value >= fraction * final)


def t_interval(diffs: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    mean = float(diffs.mean())
    if len(diffs) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.5 + level / 2, len(diffs) - 1) * diffs.std(ddof=1) / math.sqrt(len(diffs))
    return mean, mean - half, mean + half


# (sweep, method) whose rows were measured with code since corrected -> the sweep that re-ran them.
# pkd: its soft-target term was batchmean until 2026-12-01 (C times the official code's 'mean').
SUPERSEDED = {("table-baselines", "pkd"): "table-pkd-official-kd"}


def load(workdir: Path, cofi: bool = False) -> pd.DataFrame:
    """The finished trials of the table sweeps: CoFi's (`table-cofi*`) or all the others, without
    rows a later sweep re-ran after a fix (`SUPERSEDED`, applied when that sweep is there)."""
    frames = []
    for path in sorted(workdir.glob("table-*/results.parquet")):
        if path.parent.name.startswith("table-cofi") != cofi:
            continue
        frame = pd.read_parquet(path)
        frame["sweep"] = path.parent.name
        frames.append(frame)
    if not frames:
        sys.exit(f"no table-*/results.parquet under {workdir}: run benchmarks/tables/run.sh {workdir} first")
    frame = pd.concat(frames, ignore_index=True)
    for (sweep, method), by in SUPERSEDED.items():
        if (workdir / by / "results.parquet").is_file():
            frame = frame[~((frame["sweep"] == sweep) & (frame["method"] == method))]
    frame = frame[frame["status"] == "finished"].copy()
    frame["config"] = [label(r) for _, r in frame.iterrows()]
    return frame


def cofi_table(workdir: Path) -> None:
    """Issue 6's table: per target, the exports' measured encoder sparsity (CoFi's bookkeeping, from
    the pruned shapes), dev accuracy and CPU speedup over the teacher (the sweep's select stage)."""
    frame = load(workdir, cofi=True)
    teacher = float(frame["teacher_metric"].iloc[0])
    sparsity = curves(workdir, list(frame["mlflow_run_id"].dropna()), "schedule/sparsity")
    frame["sparsity"] = [sparsity[r][-1][1] if sparsity.get(r) else math.nan for r in frame["mlflow_run_id"]]
    # what the trained masks binarised to, before the surgery moved them onto the target (logged
    # since binarise_tolerance exists; earlier runs exported the trained masks as they were)
    trained = curves(workdir, list(frame["mlflow_run_id"].dropna()), "schedule/binarised_trained_sparsity")
    frame["trained"] = [trained[r][-1][1] if trained.get(r) else math.nan for r in frame["mlflow_run_id"]]
    print(f"teacher dev accuracy: {teacher:.4f}\n")
    # One row per configuration, whichever sweeps its seeds ran in (a pilot's seed 0 and a later
    # sweep's seeds 1 and 2 are one configuration when the settings and the step count agree).
    keys = ["params.target_sparsity", "params.reg_learning_rate", "params.sparsity_warmup_fraction",
            "params.finetune_learning_rate", "steps"]
    print("| target | reg lr | target ramp (share of pruning) | fine-tuning lr | steps | seeds | measured sparsity | dev accuracy mean ± std "
          "| retention | speedup (p50) | latency p50 ms | trained masks' sparsity | sweeps |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (target, reg_lr, ramp, ft_lr, steps), rows in frame.sort_values("seed").groupby(keys):
        values = rows["metric"].to_numpy(dtype=float)
        std = values.std(ddof=1) if len(values) > 1 else math.nan
        spars = ", ".join(f"{v:.3f}" for v in rows["sparsity"])
        speed = ", ".join(f"{v:.2f}×" for v in rows["speedup"])
        lat = ", ".join(f"{v:.1f}" for v in rows["latency_ms"])
        before = ", ".join("=" if math.isnan(v) else f"{v:.3f}" for v in rows["trained"])
        sweeps = ", ".join(sorted(set(rows["sweep"])))
        print(f"| {target:g} | {reg_lr:g} | {ramp:g} | {ft_lr:g} | {int(steps)} | {len(values)} | {spars} | {values.mean():.4f} ± {std:.4f} | "
              f"{values.mean() / teacher:.3f} | {speed} | {lat} | {before} | {sweeps} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--labeled-steps", type=int, default=500, help="optimizer steps on the labeled data (8,000 × 2 epochs / 32)")
    parser.add_argument("--cofi", action="store_true", help="the CoFi table (sparsity, speedup) instead of the 3-layer one")
    args = parser.parse_args()
    if args.cofi:
        cofi_table(args.workdir)
        return
    frame = load(args.workdir)
    metric = frame["metric_name"].iloc[0]
    teacher = float(frame["teacher_metric"].iloc[0])
    history = curves(args.workdir, list(frame["mlflow_run_id"].dropna()), f"eval/{metric}")
    frame["steps95"] = [
        steps_to(history.get(r["mlflow_run_id"], []), 0.95, int(r["steps"]) - args.labeled_steps) for _, r in frame.iterrows()
    ]

    print(f"teacher dev {metric}: {teacher:.4f}\n")
    # No latency column: these sweeps ran side by side on 2 cores, so their select stages timed
    # models under each other's load (the quickstart table has the measured 3-layer speedup).
    print(f"| configuration | seeds | dev {metric} mean ± std | retention | per seed | steps to 95% of final |")
    print("|---|---|---|---|---|---|")
    order = frame.groupby("config", sort=False)["metric"].mean().sort_values(ascending=False).index
    for config in order:
        rows = frame[frame["config"] == config].sort_values("seed")
        values = rows["metric"].to_numpy(dtype=float)
        std = values.std(ddof=1) if len(values) > 1 else math.nan
        per_seed = ", ".join(f"{v:.4f}" for v in values)
        print(f"| {config} | {len(values)} | {values.mean():.4f} ± {std:.4f} | {values.mean() / teacher:.3f} | {per_seed} | "
              f"{rows['steps95'].mean():.0f} |")

    by_seed = {c: dict(zip(g["seed"].astype(int), g["metric"].astype(float))) for c, g in frame.groupby("config")}
    references = [c for c in order if c.startswith(("finetune", "kd "))]
    for reference in references:
        print(f"\nPaired differences to {reference} (per seed, then mean and Student-t 95% interval):\n")
        print("| configuration | seeds | mean difference | 95% interval |")
        print("|---|---|---|---|")
        for config in order:
            if config == reference:
                continue
            shared = sorted(set(by_seed[config]) & set(by_seed[reference]))
            diffs = np.array([by_seed[config][s] - by_seed[reference][s] for s in shared])
            if not len(diffs):
                continue
            mean, low, high = t_interval(diffs)
            print(f"| {config} | {len(diffs)} | {mean:+.4f} | [{low:+.4f}, {high:+.4f}] |")


if __name__ == "__main__":
    main()
