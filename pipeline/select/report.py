"""The sweep's report: `report.md`, `report.html`, `pareto.png` and `pareto.csv`.

Every run keeps its own: they are written into the run's folder, `<sweep_dir>/runs/<run id>/`
(beside its spec.json, its latency.json and, once a newer run has started, its results.parquet),
and copied to the top of `<sweep_dir>`, where the newest run's always are (`publish_latest`).
Copies, not links: a link does not survive a push to an object store (`pipeline.storage`), and
each copy is replaced whole (a temporary file renamed), so a reader never sees half of one. A
sweep folder with no recorded run (no state.json) gets them at its top only, as before.

Everything here is derived from files the sweep already wrote — results.parquet, latency.json
(the teacher's timing and the settings), variants.parquet (the runtime variants, when built) and
the spec the run saved — so `drydock report
WORKDIR/SWEEP` rebuilds the same report later, on another machine, without timing or training
anything (and `drydock report WORKDIR/SWEEP/runs/<run id>` an earlier run's, in its folder).
Selection is recomputed with the pure functions of `pipeline.select.pareto`; it is
deterministic, so it agrees with the `pareto` column the select stage wrote.

The plot uses matplotlib's object API with the Agg canvas, never pyplot: pyplot would pick a GUI
backend (or need `matplotlib.use`, a process-wide switch) in whatever process imports this. With
a variants table it has a second panel, the runtimes as separate series (`pareto_figure`).
"""

from __future__ import annotations

import html
import json
import math
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline import results as results_table
from pipeline.config import SelectionConfig, SweepSpec, spec_from_dict
from pipeline.errors import DrydockError, SpecError
from pipeline.measure.job import TEACHER
from pipeline.measure.latency import LatencyRecord, Measurement, load_record
from pipeline.measure.runtimes import EAGER
from pipeline.measure.table import read_variants, shape_column, table_shapes, variants_path
from pipeline.select.champion import champion_rule
from pipeline.select.pareto import Selection, best_per_method, select
from pipeline.select.search_section import search_section, section_html, section_markdown
from pipeline.select.variants import INT8, dominated_by, has_variants, served_champion, served_marked, stack_summary
from pipeline.workdir import LATENCY_FILE, PARETO_CSV, PARETO_PNG, REPORT_HTML, REPORT_MD, SPEC_FILE, atomic_path, current_run_dir

DASH = "–"


@dataclass
class ReportFiles:
    markdown: Path
    html: Path
    plot: Path
    table: Path
    extra: tuple[Path, ...] = ()  # what a section adds beside them (the search's plot)

    def all(self) -> list[Path]:
        return [self.markdown, self.html, self.plot, self.table, *self.extra]

    @classmethod
    def of(cls, folder: Path) -> ReportFiles:
        return cls(folder / REPORT_MD, folder / REPORT_HTML, folder / PARETO_PNG, folder / PARETO_CSV)


def publish_latest(files: list[Path], sweep_dir: Path) -> list[Path]:
    """Copies of a run's files at the top of `sweep_dir`, where the newest run's are found: each
    written to a hidden temporary file, then renamed over the previous run's copy."""
    copies = []
    for path in files:
        target = sweep_dir / path.name
        with atomic_path(target) as tmp:
            shutil.copyfile(path, tmp)
        copies.append(target)
    return copies


@dataclass
class ReportContext:
    """What the report says besides the table itself."""

    sweep: str
    selection: SelectionConfig
    teacher_name: str | None = None
    latency: LatencyRecord | None = None
    variants: pd.DataFrame | None = None  # variants.parquet (`pipeline.measure.table`), when the stage built it

    @property
    def teacher(self) -> Measurement | None:
        return self.latency.teacher if self.latency else None


# ----------------------------------------------------------------------------------------------
# formatting
# ----------------------------------------------------------------------------------------------


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def fmt(value: Any, digits: int = 4) -> str:
    return DASH if _missing(value) else f"{value:.{digits}f}"


def fmt_mean_std(mean: float, std: float, n: int) -> str:
    """`0.8123 ± 0.0042 (n=3)`; one seed has no spread to show."""
    if _missing(mean):
        return DASH
    spread = f" ± {std:.4f}" if not _missing(std) else ""
    return f"{mean:.4f}{spread} (n={n})"


def fmt_params(value: Any) -> str:
    if _missing(value):
        return DASH
    return f"{value / 1e6:.2f}M" if value >= 1e5 else f"{round(value):,}"


def fmt_latency(p50: Any, p90: Any) -> str:
    return DASH if _missing(p50) else f"{p50:.2f} / {p90:.2f}" if not _missing(p90) else f"{p50:.2f}"


def fmt_speedup(value: Any) -> str:
    return DASH if _missing(value) else f"{value:.2f}×"


def fmt_diff(mean: float, low: float, high: float) -> tuple[str, str]:
    interval = DASH if _missing(low) else f"[{low:+.4f}, {high:+.4f}]"
    return (DASH if _missing(mean) else f"{mean:+.4f}"), interval


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured table (pandas' to_markdown needs tabulate, which drydock does not ship)."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def config_table(configs: pd.DataFrame, metric_name: str, marks: bool = True) -> pd.DataFrame:
    """Display strings for configurations (one row each), in the order given."""
    rows = []
    for _, c in configs.iterrows():
        row = {
            "method": c["method"],
            "configuration": c["config"],
            f"{metric_name} (mean ± std)": fmt_mean_std(c["metric_mean"], c["metric_std"], int(c["n"])),
            "retention": fmt(c["retention_mean"], 3),
            "params": fmt_params(c["num_params"]),
            "latency ms (p50 / p90)": fmt_latency(c["latency_ms"], c["latency_p90_ms"]),
            "speedup": fmt_speedup(c["speedup"]),
        }
        if marks:
            row["Pareto"] = "★" if c.get("pareto") else ""
            row["champion"] = "◆" if c.get("champion") else ""
        rows.append(row)
    return pd.DataFrame(rows)


def front_table(chosen: Selection, metric_name: str) -> pd.DataFrame:
    rows = []
    for _, c in chosen.front.iterrows():
        rows.append({
            "configuration": c["config"],
            f"{metric_name} (mean ± std)": fmt_mean_std(c["metric_mean"], c["metric_std"], int(c["n"])),
            "latency ms (p50 / p90)": fmt_latency(c["latency_ms"], c["latency_p90_ms"]),
            "speedup": fmt_speedup(c["speedup"]),
            "params": fmt_params(c["num_params"]),
            "registered seed (metric, latency ms)": f"{c['best_trial_id']} ({fmt(c['best_metric'])}, {fmt(c['best_latency_ms'], 2)})",
            "student": c["best_student_path"] or DASH,
        })
    return pd.DataFrame(rows)


def comparison_table(chosen: Selection) -> pd.DataFrame:
    rows = []
    for _, c in chosen.comparisons.iterrows():
        mean, interval = fmt_diff(c["mean_diff"], c["ci_low"], c["ci_high"])
        rows.append({
            "comparison": f"{c['config_a']} − {c['config_b']}",
            "shared seeds": f"{c['n_pairs']} ({', '.join(str(s) for s in c['seeds'])})" if c["n_pairs"] else "0",
            "mean difference": mean,
            "bootstrap 95% interval": interval,
        })
    return pd.DataFrame(rows)


def metric_name_of(frame: pd.DataFrame) -> str:
    if not len(frame):
        return "metric"
    names = frame["metric_name"].dropna().astype(str).unique()
    return names[0] if len(names) else "metric"


def _teacher_metric(frame: pd.DataFrame) -> float | None:
    if not len(frame):
        return None
    values = frame["teacher_metric"].dropna()
    return float(values.iloc[0]) if len(values) else None


# ----------------------------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------------------------


def teacher_line(frame: pd.DataFrame, ctx: ReportContext) -> str:
    metric_name = metric_name_of(frame)
    teacher_metric = _teacher_metric(frame)
    parts = [f"**Teacher** {ctx.teacher_name or DASH}:", f"{metric_name} {fmt(teacher_metric)}"]
    t = ctx.teacher
    if t is not None:
        parts.append(f"latency {t.p50_ms:.2f} ms (p90 {t.p90_ms:.2f}), {fmt_params(t.num_params)} params")
    else:
        parts.append("latency not measured")
    return " · ".join([parts[0] + " " + parts[1], *parts[2:]])


def latency_line(ctx: ReportContext) -> str:
    """How, where and what was timed: the shape and device, the nodes with the teacher's spread
    over them (each speedup uses its own node's teacher), and which seeds."""
    settings = ctx.latency.settings if ctx.latency else ctx.selection.latency
    measured = (ctx.teacher or next(iter(ctx.latency.students.values()), None)) if ctx.latency else None
    where = f"on {measured.description}" if measured is not None else f"on {settings.device} (not measured yet)"
    line = f"Latency: batch {settings.batch_size} × {settings.seq_length} tokens {where}; p50 / p90 in ms."
    teachers = [m for node_id, m in ctx.latency.teachers.items() if node_id] if ctx.latency else []
    if ctx.latency and ctx.latency.interleaved:
        host = measured.hostname if measured is not None and measured.hostname else "one node"
        line += (f" Timed once, interleaved with every runtime variant in one process on {host} (the Runtimes "
                 "section's `torch` rows); every speedup is the median over rounds of the within-round ratio to "
                 "the teacher.")
    elif teachers:
        hosts = ", ".join(sorted({m.hostname or m.node_id[:12] for m in teachers}))
        p50s = sorted(m.p50_ms for m in teachers)
        spread = f"{p50s[0]:.2f} ms" if len(p50s) == 1 else f"{p50s[0]:.2f}–{p50s[-1]:.2f} ms"
        line += (f" Timed in parallel on {len(teachers)} node(s) ({hosts}), the teacher on each (p50 {spread}); "
                 "every speedup is against the teacher on the student's own node.")
    if ctx.latency and ctx.latency.not_timed:
        line += (f" One export per configuration was timed, the seed the registry serves ({len(ctx.latency.not_timed)} "
                 "other seed(s) untimed; `selection.latency.all_seeds: true` times every seed).")
    return line


def champion_line(chosen: Selection, ctx: ReportContext) -> str:
    rule = champion_rule(ctx.selection)
    served = served_champion(ctx.variants, chosen.configs, ctx.selection)
    if has_variants(ctx.variants) and served is None:
        return f"**Champion** ({rule}, over runtimes): none — no variant of a served export qualifies; the alias stays where it was."
    if served is not None:  # the alias goes to a variant: its own figures, measured in its runtime
        return (f"**Champion** ({rule}, over runtimes): {config_name(chosen.configs, served['trial_id'])} in {served['runtime']} — {fmt(served['metric'])} (this export), "
                f"{fmt(served['latency_ms'], 2)} ms p50, {fmt_speedup(served['speedup'])} over the teacher in eager fp32; "
                f"registered seed {served['trial_id']} (the Runtimes section)")
    if chosen.champion is None:
        return f"**Champion** ({rule}): none — no Pareto configuration qualifies."
    c = chosen.champion
    return (f"**Champion** ({rule}): {c['config']} — {fmt_mean_std(c['metric_mean'], c['metric_std'], int(c['n']))}, "
            f"{fmt_latency(c['latency_ms'], c['latency_p90_ms'])} ms, {fmt_speedup(c['speedup'])} (seed means); "
            f"registered seed {c['best_trial_id']}: {fmt_latency(c['best_latency_ms'], c['best_latency_p90_ms'])} ms, "
            f"{fmt_speedup(c['best_speedup'])}")


def trial_counts(frame: pd.DataFrame) -> str:
    counts = frame["status"].value_counts() if len(frame) else pd.Series(dtype=int)
    detail = ", ".join(f"{int(n)} {status}" for status, n in counts.items())
    return f"Trials: {len(frame)}" + (f" ({detail})" if detail else "")


def failures(frame: pd.DataFrame) -> list[str]:
    failed = frame[frame["status"] == "failed"] if len(frame) else frame
    return [f"- {r['trial_id']}: {str(r['error'] or 'no reason recorded')[:200]}" for _, r in failed.iterrows()]


def variants_table(table: pd.DataFrame) -> pd.DataFrame:
    """Display strings for variants.parquet: each model in each runtime, its own metric and the
    change from the same model in eager fp32, its size, and at each shape the p50 with its ~95%
    interval and the speedups over the teacher in eager fp32 and in the same runtime."""
    metric_name = metric_name_of(table)
    fp32 = {str(r["trial_id"]): r["metric"] for _, r in table[table["runtime"] == EAGER].iterrows()}
    rows = []
    for _, r in table.iterrows():
        base = fp32.get(str(r["trial_id"]))
        delta = r["metric"] - base if not (_missing(r["metric"]) or _missing(base)) else None
        row = {"model": r["trial_id"], "runtime": r["runtime"], metric_name: fmt(r["metric"]),
               "Δ vs fp32 (pts)": DASH if delta is None else f"{delta * 100:+.2f}",
               "size MB": DASH if _missing(r["size_bytes"]) else f"{r['size_bytes'] / 1e6:.2f}"}
        for shape in table_shapes(table):
            p50, low, high = (r[shape_column(f, shape)] for f in ("latency_ms", "latency_low_ms", "latency_high_ms"))
            row[f"p50 ms @{shape}"] = DASH if _missing(p50) else f"{p50:.2f} [{low:.2f}–{high:.2f}]"
            row[f"speedup @{shape} (fp32 / same)"] = (f"{fmt_speedup(r[shape_column('speedup', shape)])} / "
                                                      f"{fmt_speedup(r[shape_column('speedup_same_runtime', shape)])}")
        row["Pareto"] = "★" if not _missing(r["pareto"]) and bool(r["pareto"]) else ""
        rows.append(row)
    return pd.DataFrame(rows)


def variants_note(table: pd.DataFrame, selection: SelectionConfig, configs: pd.DataFrame | None = None) -> str:
    """What the Runtimes table is, what each stage of the stack bought (`stack_summary`, over the
    exports `configs` serves when given: its student is then the served champion's), which
    students dominate the teacher's int8 variant, and which variants failed."""
    front = str(table["front_shape"].dropna().iloc[0]) if table["front_shape"].notna().any() else DASH
    parts = [f"Each model in each runtime, scored on the dev set itself; timed interleaved in one process at each shape "
             f"(p50 [~95% interval]); ★ on the front over (configuration, runtime) at {front}, where a latency difference "
             "inside the intervals never decides. The teacher is shown, never on the front."]
    served = table if configs is None or not len(configs) else table[
        table["trial_id"].astype(str).isin({*configs["best_trial_id"].astype(str), TEACHER})]
    summary = stack_summary(served, selection)
    if summary is not None:
        parts.append(summary.line())
    if ((table["trial_id"] == TEACHER) & (table["runtime"] == INT8)).any():
        beaters = dominated_by(served, TEACHER, INT8, selection)
        parts.append(f"Students that dominate the teacher in {INT8}: {', '.join(beaters) if beaters else 'none'}.")
    failed = table[table["error"].notna()]
    if len(failed):
        parts.append("Failed: " + "; ".join(f"{r['trial_id']}/{r['runtime']} ({str(r['error'])[:160]})"
                                            for _, r in failed.iterrows()) + ".")
    return " ".join(parts)


# ----------------------------------------------------------------------------------------------
# the plot
# ----------------------------------------------------------------------------------------------


PLOT_HEIGHT = 5.5  # inches, at PLOT_DPI; 8 wide with one panel, 15 with the runtimes' beside it
PLOT_DPI = 120
RUNTIME_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")  # a student's variants, by runtime
VARIANT_FRONT = "variant front"


def teacher_variant_label(runtime: str) -> str:
    """The legend's name for the teacher in one runtime: "teacher · onnxruntime-int8"."""
    return f"{TEACHER} · {runtime}"


def _plotted_variants(table: pd.DataFrame) -> pd.DataFrame:
    """The rows the runtimes panel shows: built, scored and timed at the front's shape."""
    ok = table["error"].isna() & table["metric"].notna() & table["latency_ms"].notna()
    return table[ok]


def _latency_errors(rows: pd.DataFrame) -> list[list[float]]:
    """matplotlib's asymmetric `xerr`: each p50's distance to the ends of its ~95% interval (none
    where the interval is missing)."""
    below = (rows["latency_ms"] - rows["latency_low_ms"]).clip(lower=0).fillna(0.0)
    above = (rows["latency_high_ms"] - rows["latency_ms"]).clip(lower=0).fillna(0.0)
    return [below.tolist(), above.tolist()]


def _log_if_wide(ax: Any, xs: list[float]) -> None:
    if xs and min(xs) > 0 and max(xs) / min(xs) > 20:
        ax.set_xscale("log")


def pareto_figure(chosen: Selection, frame: pd.DataFrame, ctx: ReportContext) -> Any:
    """pareto.png as a matplotlib Figure (Agg canvas). One panel, metric vs latency of the
    sweep's configurations in eager fp32 (`_eager_panel`); with a variants table
    (`ReportContext.variants`), a second panel beside it on the same metric axis: the runtimes
    (`_runtimes_panel`).

    Beside, not on the same axes: the left shows the configurations' seed means (each model's
    eager fp32 timing is the right panel's `torch` row: one measurement, `pipeline.measure.eager`),
    the right one model per configuration in each runtime with its interval, each with its own
    front. On one axes every student would be drawn twice and the two fronts crossed; side by
    side, with the metric axis shared, a runtime's gain is read against the eager configurations
    at a glance. With variants the champion the registry offers the alias to is the runtimes
    panel's (`served_champion`), so only that panel names it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    variants = ctx.variants if ctx.variants is not None and len(ctx.variants) else None
    fig = Figure(figsize=(8 if variants is None else 15, PLOT_HEIGHT), dpi=PLOT_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1 if variants is None else 2, 1)
    _eager_panel(ax, chosen, frame, ctx, alone=variants is None)
    if variants is not None:
        _runtimes_panel(fig.add_subplot(1, 2, 2, sharey=ax), variants, chosen.configs, ctx)
    fig.tight_layout()
    return fig


def pareto_plot(chosen: Selection, frame: pd.DataFrame, ctx: ReportContext, path: Path) -> Path:
    """pareto.png (`pareto_figure`)."""
    pareto_figure(chosen, frame, ctx).savefig(path)
    return path


def _eager_panel(ax: Any, chosen: Selection, frame: pd.DataFrame, ctx: ReportContext, alone: bool = True) -> None:
    """Metric vs latency: every configuration with its seed spread, the front, the teacher."""
    metric_name = metric_name_of(frame)
    measured = chosen.configs[chosen.configs["latency_ms"].notna()] if len(chosen.configs) else chosen.configs
    colors = {m: f"C{i % 10}" for i, m in enumerate(dict.fromkeys(chosen.configs["method"]))} if len(chosen.configs) else {}
    for method, group in measured.groupby("method", sort=False):
        ax.errorbar(group["latency_ms"], group["metric_mean"], yerr=group["metric_std"].fillna(0.0), fmt="o",
                    color=colors[method], label=method, capsize=3, alpha=0.85)
    front = chosen.front
    if len(front):
        ax.step(front["latency_ms"], front["metric_mean"], where="post", color="black", linewidth=1, label="Pareto front")
        ax.scatter(front["latency_ms"], front["metric_mean"], s=120, facecolors="none", edgecolors="black", zorder=3)
    if chosen.champion is not None and alone:  # with variants, the runtimes panel names the champion
        c = chosen.champion
        ax.annotate("champion", (c["latency_ms"], c["metric_mean"]), textcoords="offset points", xytext=(8, 8))
    teacher_metric = _teacher_metric(frame)
    if teacher_metric is not None and ctx.teacher is not None:
        ax.scatter([ctx.teacher.p50_ms], [teacher_metric], marker="*", s=220, color="gold", edgecolors="black",
                   zorder=4, label="teacher")
    elif teacher_metric is not None:
        ax.axhline(teacher_metric, color="gray", linestyle="--", linewidth=1, label="teacher (latency not measured)")
    if ctx.selection.max_latency_ms is not None:
        ax.axvline(ctx.selection.max_latency_ms, color="red", linestyle=":", linewidth=1, label="latency budget")
    if not len(measured):
        ax.text(0.5, 0.5, "latency not measured yet", transform=ax.transAxes, ha="center", va="center")
    _log_if_wide(ax, list(measured["latency_ms"]) + ([ctx.teacher.p50_ms] if ctx.teacher else []))
    settings = ctx.latency.settings if ctx.latency else ctx.selection.latency
    ax.set_xlabel(f"latency, ms (p50; batch {settings.batch_size} × {settings.seq_length}, {settings.device})")
    ax.set_ylabel(f"{metric_name} (mean ± std over seeds)")
    ax.set_title(f"{ctx.sweep}: {metric_name} vs latency" + ("" if alone else " (eager fp32)"))
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")


def _runtimes_panel(ax: Any, table: pd.DataFrame, configs: pd.DataFrame, ctx: ReportContext) -> None:
    """variants.parquet at the front's shape: each student variant at its p50 with the ~95%
    interval as a horizontal bar, one series (colour and marker) per runtime; the variant front
    (`pareto` True) joined as the eager front is; the teacher in each runtime as a star of that
    runtime's colour, labelled "teacher · <runtime>". Variants with an error or without a metric
    or a timing at the front's shape are left out (the Runtimes table lists them). The champion
    named is the one the registry serves (`served_champion`: among each configuration's best seed)."""
    runtimes = list(dict.fromkeys(str(r) for r in table["runtime"]))
    colors = {r: f"C{i % 10}" for i, r in enumerate(runtimes)}
    markers = {r: RUNTIME_MARKERS[i % len(RUNTIME_MARKERS)] for i, r in enumerate(runtimes)}
    shown = _plotted_variants(table)
    students = shown[shown["trial_id"] != TEACHER]
    for runtime in runtimes:
        rows = students[students["runtime"] == runtime]
        if len(rows):
            ax.errorbar(rows["latency_ms"], rows["metric"], xerr=_latency_errors(rows), fmt=markers[runtime],
                        color=colors[runtime], label=runtime, capsize=3, alpha=0.85)
    marked = served_marked(table, configs, ctx.selection).loc[students.index]  # the front the registry serves
    front = students[marked["pareto"].fillna(False).astype(bool)].sort_values("latency_ms", kind="stable")
    if len(front):
        ax.step(front["latency_ms"], front["metric"], where="post", color="black", linewidth=1, label=VARIANT_FRONT)
        ax.scatter(front["latency_ms"], front["metric"], s=120, facecolors="none", edgecolors="black", zorder=3)
    champion = served_champion(table, configs, ctx.selection)
    if champion is not None and pd.notna(champion["latency_ms"]) and pd.notna(champion["metric"]):
        ax.annotate(f"champion ({champion['runtime']})", (champion["latency_ms"], champion["metric"]),
                    textcoords="offset points", xytext=(8, 8))
    teacher = shown[shown["trial_id"] == TEACHER]
    for runtime in runtimes:
        rows = teacher[teacher["runtime"] == runtime]
        if len(rows):
            ax.errorbar(rows["latency_ms"], rows["metric"], xerr=_latency_errors(rows), fmt="*", markersize=15,
                        color=colors[runtime], markeredgecolor="black", capsize=3, zorder=4,
                        label=teacher_variant_label(runtime))
    if ctx.selection.max_latency_ms is not None:
        ax.axvline(ctx.selection.max_latency_ms, color="red", linestyle=":", linewidth=1, label="latency budget")
    if not len(shown):
        ax.text(0.5, 0.5, "no variant timed", transform=ax.transAxes, ha="center", va="center")
    _log_if_wide(ax, list(shown["latency_ms"]))
    front_shape = table["front_shape"].dropna()
    device = table["device"].dropna()
    threads = table["threads"].dropna()
    where = ", ".join([str(device.iloc[0]) if len(device) else ctx.selection.latency.device,
                       *([f"{int(threads.iloc[0])} threads"] if len(threads) else [])])
    shape = str(front_shape.iloc[0]) if len(front_shape) else ctx.selection.latency.front_shape.label
    ax.set_xlabel(f"latency, ms (p50 with its ~95% interval; {shape}, interleaved, {where})")
    ax.set_title(f"{metric_name_of(table)} vs latency by runtime (every student timed)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")


# ----------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------


def config_name(configs: pd.DataFrame, trial_id: object) -> str:
    """The configuration's name (`kd alpha=0.9`) whose served export is `trial_id`; the id itself
    when no configuration serves it."""
    return str(configs.set_index("best_trial_id")["config"].get(str(trial_id), str(trial_id)))


def served_marks(chosen: Selection, ctx: ReportContext) -> Selection:
    """`chosen` with its ◆ on the alias's candidate: with variants, the served variant's
    configuration (`served_champion`) when that variant is eager fp32, and no row when it is an
    int8 export or no variant qualifies; without variants, the configurations' own champion."""
    if not has_variants(ctx.variants):
        return chosen
    served = served_champion(ctx.variants, chosen.configs, ctx.selection)
    if served is None:
        return replace(chosen, configs=chosen.configs.assign(champion=False))
    won = (chosen.configs["best_trial_id"].astype(str) == str(served["trial_id"])) & (served["runtime"] == EAGER)
    return replace(chosen, configs=chosen.configs.assign(champion=won))


def write_report(sweep_dir: Path, frame: pd.DataFrame, ctx: ReportContext, chosen: Selection | None = None) -> ReportFiles:
    """Write report.md, report.html, pareto.png and pareto.csv into `sweep_dir`: the run's own
    folder when there is one (`publish_latest` copies them to the sweep's top level)."""
    chosen = served_marks(chosen or select(frame, ctx.selection), ctx)
    metric_name = metric_name_of(frame)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(sweep_dir / REPORT_MD, sweep_dir / REPORT_HTML, sweep_dir / PARETO_PNG, sweep_dir / PARETO_CSV)
    pareto_plot(chosen, frame, ctx, files.plot)
    chosen.configs.drop(columns=["config_key"]).to_csv(files.table, index=False)

    ordered = chosen.configs.sort_values(["method", "metric_mean"], ascending=[True, False], kind="stable") if len(chosen.configs) else chosen.configs
    sections: list[tuple[str, pd.DataFrame | None, str]] = [
        ("Methods (best configuration of each)", config_table(best_per_method(chosen.configs), metric_name, marks=False), ""),
        ("Pareto front", front_table(chosen, metric_name), f"On ({metric_name} ↑, latency ↓"
         + (", params ↓" if ctx.selection.size_objective else "") + ") over seed means (a latency: over the seeds timed, by default "
         "only the registered one); the registry gets each member's best seed, "
         "and the latency budget and the registry's latency tags are that seed's own timing."),
        ("Paired comparisons", comparison_table(chosen),
         ("Each method's best configuration against another's, paired by seed over the seeds both ran; "
          "a percentile bootstrap over those pairs. An interval that spans 0 is no evidence of a difference.")),
        ("All configurations", config_table(ordered, metric_name), "★ Pareto member, ◆ champion."),
    ]
    if ctx.variants is not None and len(ctx.variants):
        shown = served_marked(ctx.variants, chosen.configs, ctx.selection)
        sections.append(("Runtimes", variants_table(shown), variants_note(shown, ctx.selection, chosen.configs)))
    intro = [teacher_line(frame, ctx), latency_line(ctx), champion_line(chosen, ctx), trial_counts(frame)]
    failed = failures(frame)

    md = [f"# Sweep {ctx.sweep}", "", *[f"{line}  " for line in intro], ""]
    for title, table, note in sections:
        md += [f"## {title}", ""] + ([note, ""] if note else [])
        md += [markdown_table(table) if table is not None and len(table) else "_none_", ""]
    md += ["## Plot", "", f"![{metric_name} vs latency]({PARETO_PNG})", ""]
    search = search_section(sweep_dir, frame)  # a study's search, when one ran (None when its summary is unreadable)
    if search is not None:
        md += section_markdown(search, markdown_table(search.importances) if search.importances is not None else "")
        files.extra = (search.plot,) if search.plot is not None else ()
    if failed:
        md += ["## Failed trials", "", *failed, ""]
    files.markdown.write_text("\n".join(md))

    def html_table(table: pd.DataFrame | None) -> str:
        if table is None or not len(table):
            return "<p><em>none</em></p>"
        return table.to_html(index=False, border=0, escape=True, classes="table")

    body = [f"<h1>Sweep {html.escape(ctx.sweep)}</h1>"]
    body += [f"<p>{_inline_html(line)}</p>" for line in intro]
    for title, table, note in sections:
        body += [f"<h2>{html.escape(title)}</h2>"] + ([f"<p>{html.escape(note)}</p>"] if note else []) + [html_table(table)]
    body += ["<h2>Plot</h2>", f'<img src="{PARETO_PNG}" alt="{html.escape(metric_name)} vs latency">']
    if search is not None:
        body += section_html(search, _inline_html)
    if failed:
        body += ["<h2>Failed trials</h2>", "<ul>", *[f"<li>{html.escape(f[2:])}</li>" for f in failed], "</ul>"]
    files.html.write_text(_HTML.format(title=html.escape(f"Sweep {ctx.sweep}"), body="\n".join(body)))
    return files


def _inline_html(line: str) -> str:
    """The report lines use **bold** only; everything else is escaped."""
    parts = html.escape(line).split("**")
    return "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))


_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 80em; }}
table.table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
table.table th, table.table td {{ padding: 0.3em 0.8em; border-bottom: 1px solid #ddd; text-align: left; }}
img {{ max-width: 100%; }}
</style></head>
<body>
{body}
</body></html>
"""


# ----------------------------------------------------------------------------------------------
# rebuilding from files, and the table `make demo` prints
# ----------------------------------------------------------------------------------------------


def saved_spec(sweep_dir: Path) -> SweepSpec | None:
    """The spec the current run of the sweep saved (runs/<run id>/spec.json), if any; given a
    run's own folder, the spec in it."""
    run_dir = current_run_dir(sweep_dir) or sweep_dir
    spec_file = run_dir / SPEC_FILE
    if not spec_file.is_file():
        return None
    try:  # its `${VAR}`s are as written (`spec_as_written`): expanded from this environment
        return spec_from_dict(json.loads(spec_file.read_text()))
    except SpecError:  # a variable not set here (a credential in tracking.uri): the report does without the spec
        return None


def rebuild_report(sweep_dir: Path) -> ReportFiles:
    """`drydock report`: the report again from results.parquet, latency.json, variants.parquet
    (when the stage built it; nothing is timed again) and the saved spec,
    written into the current run's folder and copied to the top of `sweep_dir` (returned: the
    copies). Given a run's own folder (`runs/<run id>`: its table moved there when the next run
    started), that run's report is rebuilt in it, and the top level is left to the newest."""
    results_file = sweep_dir / results_table.RESULTS_FILE
    if not results_file.is_file():
        raise DrydockError(f"{results_file}: no results table (give WORKDIR/SWEEP of a sweep that has run)")
    frame = results_table.read_results(results_file)
    spec = saved_spec(sweep_dir)
    run_dir = current_run_dir(sweep_dir)
    # the run's own latency.json; a run from before runs kept theirs: the one at the top
    record = load_record(run_dir) if run_dir is not None and (run_dir / LATENCY_FILE).is_file() else load_record(sweep_dir)
    # the run's own variants only: a run that built none must not show an older run's from the top
    variants = read_variants(variants_path(run_dir if run_dir is not None else sweep_dir))
    ctx = ReportContext(
        sweep=spec.name if spec else sweep_dir.name,
        selection=spec.selection if spec else SelectionConfig(),
        teacher_name=(record.teacher_name if record and record.teacher_name else spec.teacher.model if spec else _teacher_from_students(frame)),
        latency=record, variants=variants if len(variants) else None,
    )
    if run_dir is None:
        return write_report(sweep_dir, frame, ctx)
    publish_latest(write_report(run_dir, frame, ctx).all(), sweep_dir)
    return ReportFiles.of(sweep_dir)


def _teacher_from_students(frame: pd.DataFrame) -> str | None:
    """Each export's drydock.json names its teacher: enough when the spec was not kept."""
    for path in frame["student_path"].dropna() if len(frame) else []:
        metadata = Path(str(path)) / "drydock.json"
        if metadata.is_file():
            teacher = json.loads(metadata.read_text()).get("teacher")
            if teacher:
                return str(teacher)
    return None
