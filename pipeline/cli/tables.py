"""Tables the `drydock` command prints: the trials at the end of a sweep, the Pareto members
(`drydock report`, `make demo`), a registered model's versions (`drydock registry list`)."""

from __future__ import annotations

import math
from io import StringIO
from typing import TYPE_CHECKING, Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from pipeline.select.champion import tag_number
from pipeline.select.pareto import config_key, row_params, select
from pipeline.select.registry import DEVICE_TAG, EAGER_RUNTIME, RUNTIME_TAG, versions
from pipeline.select.report import fmt_latency, fmt_mean_std, fmt_params, fmt_speedup, metric_name_of

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from pipeline.config import SelectionConfig

SUMMARY_COLUMNS = ("trial_id", "status", "metric", "retention", "num_params_encoder", "train_seconds")


def summary_table(frame: pd.DataFrame) -> str:
    """The trial table printed at the end of a sweep (rich, plain text when piped)."""
    table = Table(title="trials", show_lines=False)
    for col in SUMMARY_COLUMNS:
        table.add_column(col, justify="left" if col in ("trial_id", "status") else "right")
    for _, row in frame.iterrows():
        table.add_row(str(row["trial_id"]), str(row["status"]), _cell(row["metric"]), _cell(row["retention"], 3),
                      _cell(row["num_params_encoder"]), _cell(row["train_seconds"], 1))
    out = StringIO()
    Console(file=out, width=140).print(table)
    return out.getvalue()


def _cell(value: Any, digits: int = 4) -> str:
    if pd.isna(value):  # None, NaN and pandas' NA (a missing integer) alike
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def pareto_table_text(frame: pd.DataFrame, selection: SelectionConfig | None = None, variants: pd.DataFrame | None = None) -> str:
    """The Pareto members as a terminal table (rich; plain text when piped) — what `make demo`
    prints last. Without `selection`, the members are the rows the select stage marked in the
    `pareto` column (so a spec's size objective is honoured) and no champion is shown; with it,
    selection is recomputed under that spec's rules and the champion is marked: the alias's
    candidate. With variants (variants.parquet) that is the served variants' champion
    (`served_champion`), which may be another configuration's int8 export than this eager
    table's most accurate row, so the line names its runtime and the ◆ goes on a row only when
    the candidate is that configuration in eager fp32; none when no variant qualifies."""
    from pipeline.config import SelectionConfig
    from pipeline.select.report import ReportContext, config_name, served_marks
    from pipeline.select.variants import beyond_eager, has_variants, served_champion

    chosen = select(frame, selection or SelectionConfig())
    if selection is not None:  # the ◆ on the alias's candidate, as the report marks it
        chosen = served_marks(chosen, ReportContext(sweep="", selection=selection, variants=variants))
    front = chosen.front
    if selection is None and len(frame) and frame["pareto"].notna().any():
        marked = frame[frame["pareto"].fillna(False).astype(bool)]
        keys = {config_key(str(r["method"]), row_params(r)) for _, r in marked.iterrows()}
        front = chosen.configs[chosen.configs["config_key"].isin(keys)].sort_values("latency_ms", kind="stable")
    metric_name = metric_name_of(frame)
    out = StringIO()
    console = Console(file=out, width=140)
    if not len(front):
        console.print("Pareto front: empty (no finished trial with a measured latency)")
        return out.getvalue()
    table = Table(title=f"Pareto front ({metric_name} ↑, latency ↓)")
    for column in ["configuration", f"{metric_name} (mean ± std)", "latency ms (p50 / p90)", "speedup", "params", "best seed"]:
        table.add_column(column, justify="left" if column in ("configuration", "best seed") else "right")
    for _, c in front.iterrows():
        mark = " ◆" if selection is not None and c.get("champion") else ""
        table.add_row(c["config"] + mark, fmt_mean_std(c["metric_mean"], c["metric_std"], int(c["n"])),
                      fmt_latency(c["latency_ms"], c["latency_p90_ms"]), fmt_speedup(c["speedup"]),
                      fmt_params(c["num_params"]), c["best_trial_id"])
    console.print(table)
    if selection is not None and has_variants(variants):
        served = served_champion(variants, chosen.configs, selection)
        if served is None:
            console.print("◆ champion: none (no variant of a served export qualifies; the alias stays where it was)")
        else:
            console.print(f"◆ champion: {config_name(chosen.configs, served['trial_id'])} in {served['runtime']}"
                          + (" (the runtimes table below)" if beyond_eager(variants) else ""))
    elif selection is not None and chosen.champion is not None:
        console.print(f"◆ champion: {chosen.champion['config']}")
    return out.getvalue()


def runtimes_table_text(variants: pd.DataFrame, frame: pd.DataFrame, selection: SelectionConfig) -> str:
    """variants.parquet as the command prints it after the front: every model in every runtime at
    the front's shape — its own dev metric, p50 with its ~95% interval, speedup over the teacher
    in eager fp32, size — ★ on the front the registry registers (`served_front`: each
    configuration's best seed in every runtime, marked among themselves), ◆ its champion, the
    alias's candidate. A weaker seed's row is shown, never marked: it is not served. Empty when
    the sweep built no runtime variant."""
    from pipeline.measure.job import TEACHER
    from pipeline.select.variants import beyond_eager, served_front, variant_champion

    if not beyond_eager(variants):
        return ""
    configs = select(frame, selection).configs if len(frame) else pd.DataFrame(columns=["config_key", "config"])
    named = dict(zip(configs["config_key"], configs["config"]))  # the front table's names (`kd alpha=0.9`)
    names = {str(r["trial_id"]): named.get(config_key(str(r["method"]), row_params(r)), str(r["trial_id"])) for _, r in frame.iterrows()}
    served = served_front(variants, configs, selection) if len(configs) else variants.iloc[:0]
    registered = {(str(r["trial_id"]), str(r["runtime"])) for _, r in served.iterrows() if not pd.isna(r["pareto"]) and bool(r["pareto"])}
    champion = variant_champion(served, selection) if len(served) else None
    shape = str(variants["front_shape"].dropna().iloc[0]) if variants["front_shape"].notna().any() else "?"
    table = Table(title=f"Runtimes at batch × length {shape} ({metric_name_of(variants)} ↑, latency ↓; ★ front, ◆ champion)")
    for column in ["model", "runtime", metric_name_of(variants), "p50 ms [~95%]", "speedup", "size MB", ""]:
        table.add_column(column, justify="left" if column in ("model", "runtime", "") else "right")
    ordered = variants.assign(_teacher=variants["trial_id"] != TEACHER).sort_values(["_teacher", "latency_ms"], kind="stable")
    for _, r in ordered.iterrows():
        trial = str(r["trial_id"])
        won = champion is not None and trial == str(champion["trial_id"]) and r["runtime"] == champion["runtime"]
        marks = ("★" if (trial, str(r["runtime"])) in registered else "") + (" ◆" if won else "")
        latency = "–" if pd.isna(r["latency_ms"]) else f"{r['latency_ms']:.2f} [{r['latency_low_ms']:.2f}–{r['latency_high_ms']:.2f}]"
        size = "–" if pd.isna(r["size_bytes"]) else f"{r['size_bytes'] / 1e6:.1f}"
        table.add_row(TEACHER if trial == TEACHER else names.get(trial, trial), str(r["runtime"]), _cell(r["metric"]), latency,
                      fmt_speedup(r["speedup"]), size, marks)
    out = StringIO()
    Console(file=out, width=140).print(table)
    return out.getvalue()


def registry_table_text(client: MlflowClient, name: str) -> str:
    """`drydock registry list NAME`: versions with their figures, and where the aliases point."""
    model = client.get_registered_model(name)
    aliases: dict[str, list[str]] = {}
    for alias, version in (model.aliases or {}).items():
        aliases.setdefault(str(version), []).append(alias)
    table = Table(title=f"{name}: {', '.join(f'{a} → v{v}' for a, v in sorted((model.aliases or {}).items())) or 'no aliases'}")
    for column in ["version", "aliases", "configuration", "runtime", "metric (mean ± std, n)", "latency ms", "speedup", "params",
                   "measured on (device, batch × sequence length)", "trial"]:
        table.add_column(column, justify="right" if column in ("version", "latency ms", "speedup", "params") else "left")
    for v in versions(client, name):
        t = v.tags
        metric = (f"{t.get('metric_name', '?')} {tag_number(t.get('metric')):.4f}"
                  + (f" ± {tag_number(t.get('metric_std')):.4f}" if not math.isnan(tag_number(t.get("metric_std"))) else "")
                  + (f" (n={t.get('metric_n', '?')})" if "metric_n" in t else " (this export)")) if "metric" in t else "–"
        table.add_row(str(v.version), ", ".join(aliases.get(str(v.version), [])), t.get("config", "–"),
                      t.get(RUNTIME_TAG, EAGER_RUNTIME), metric,
                      _fixed(t.get("latency_ms"), 2), _fixed(t.get("speedup"), 2, "×"), _params(t.get("num_params")),
                      _measured_on(t), t.get("trial_id", "–"))
    out = StringIO()
    Console(file=out, width=200).print(table)
    return out.getvalue()


def _measured_on(tags: dict[str, str]) -> str:
    """`Test CPU (cpu, 4 threads, torch 2.x), batch 8 × 32`: a latency means little without its shape."""
    parts = [tags["latency_device"]] if tags.get("latency_device") else []
    if not parts and tags.get(DEVICE_TAG):  # a runtime variant: timed interleaved, in its runtime
        parts.append(f"{tags[DEVICE_TAG]}, {tags.get('latency_threads', '?')} threads")
    if tags.get("latency_batch_size") or tags.get("latency_seq_length"):
        parts.append(f"batch {tags.get('latency_batch_size', '?')} × {tags.get('latency_seq_length', '?')}")
    return ", ".join(parts) or "–"


def _params(text: str | None) -> str:
    value = tag_number(text)
    return "–" if math.isnan(value) else fmt_params(value)


def _fixed(text: str | None, digits: int, suffix: str = "") -> str:
    value = tag_number(text)
    return "–" if math.isnan(value) else f"{value:.{digits}f}{suffix}"
