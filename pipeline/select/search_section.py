"""The report's "Search" section, for a sweep a study searched (`search.algorithm` other than grid).

It reads what the search stage left in the run's folder (`SEARCH_FILE`, written by the sweep from
`pipeline.search.searcher`), so the report needs nothing of Ray or Optuna: the configurations as
told, the front's hypervolume after each (plotted: `SEARCH_PNG`), each method's parameter
importances, and how the latencies the search steered by rank against the select stage's own
(Spearman over the configurations both timed): a search whose latencies were measured beside
busy trials says here how far they could be trusted.
"""

from __future__ import annotations

import html
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.measure.job import TEACHER
from pipeline.measure.table import read_variants, variants_path
from pipeline.workdir import SEARCH_FILE, SEARCH_PNG, config_id_of

logger = logging.getLogger(__name__)


@dataclass
class SearchSection:
    lines: list[str] = field(default_factory=list)  # markdown, one paragraph line each
    importances: pd.DataFrame | None = None
    plot: Path | None = None


def final_latencies(frame: pd.DataFrame, variants: pd.DataFrame | None = None) -> dict[str, float]:
    """Each configuration's latency as the select stage timed it (the mean over the seeds timed):
    with `variants` (variants.parquet), each seed's fastest runtime, as the search took it
    (`pipeline.search.search_latency`); else results.parquet's eager fp32."""
    if variants is not None and len(variants):
        rows = variants[variants["latency_ms"].notna() & variants["error"].isna() & (variants["trial_id"] != TEACHER)]
        fastest = rows.groupby("trial_id")["latency_ms"].min()
        frame = frame.assign(latency_ms=frame["trial_id"].astype(str).map(fastest))
    timed = frame[frame["latency_ms"].notna()]
    ids = [config_id_of(str(key), str(m)) for key, m in zip(timed["trial_id"], timed["method"], strict=True)]
    return {str(k): float(v) for k, v in timed.groupby(ids)["latency_ms"].mean().items()}


def rank_agreement(summary: dict[str, Any], frame: pd.DataFrame,
                   variants: pd.DataFrame | None = None) -> tuple[float, int] | None:
    """Spearman's rho of search-time against final latencies (`final_latencies`), and over how
    many configurations."""
    from scipy.stats import spearmanr

    final = final_latencies(frame, variants)
    pairs = [(c["latency_ms"], final[c["config_id"]]) for c in summary["configurations"]
             if c.get("latency_ms") is not None and c["config_id"] in final]
    if len(pairs) < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return None  # too few to rank, or a side all equal (no ranking at all)
    rho = float(spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic)
    return (rho, len(pairs)) if math.isfinite(rho) else None


def search_section(run_dir: Path, frame: pd.DataFrame) -> SearchSection | None:
    path = run_dir / SEARCH_FILE
    if not path.is_file():
        return None
    try:
        return _section(json.loads(path.read_text(encoding="utf-8")), run_dir, frame)
    except (ValueError, KeyError, TypeError, IndexError) as e:  # a report without the section, not a failed stage
        logger.warning("report: %s is unreadable (%s); no Search section", path, e)
        return None


def _section(summary: dict[str, Any], run_dir: Path, frame: pd.DataFrame) -> SearchSection:
    told = summary["configurations"]
    counts = {k: sum(c["told"] == k for c in told) for k in ("complete", "pruned", "failed")}
    section = SearchSection([
        f"**{summary['algorithm']}**, aiming at {' and '.join(summary['objectives'])}: {len(told)} of {summary['budget']} "
        f"configurations told ({counts['complete']} complete, {counts['pruned']} pruned by ASHA, {counts['failed']} failed)."])
    curve = summary.get("hypervolume") or []
    if curve:
        ref = summary["reference"]
        section.lines.append(f"Hypervolume of the front after {len(curve)} configurations: {curve[-1]:.4g} (reference: metric "
                             f"{ref[0]:g}, the teacher's {ref[1]:.3g} ms as the search timed it).")
        section.plot = _plot(curve, run_dir / SEARCH_PNG)
    variants_file = variants_path(run_dir)
    variants = read_variants(variants_file) if variants_file.is_file() else None
    agreement = rank_agreement(summary, frame, variants)
    if agreement is not None:
        which = " (each one's fastest runtime)" if variants is not None else ""
        section.lines.append(f"Search-time latencies against the select stage's{which}: Spearman ρ = {agreement[0]:.2f} over "
                             f"{agreement[1]} configurations timed by both.")
    rows = [{"method": m, "parameter": p.split(".", 1)[1], "importance": round(v, 3)}
            for m, found in (summary.get("importances") or {}).items() for p, v in found.items()]
    section.importances = pd.DataFrame(rows) if rows else None
    return section


def _plot(curve: list[float], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(1, len(curve) + 1), curve, marker="o", markersize=3)
    ax.set_xlabel("configurations told")
    ax.set_ylabel("hypervolume of the front")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def section_markdown(section: SearchSection, table: str) -> list[str]:
    md = ["## Search", "", *[f"{line}  " for line in section.lines], ""]
    if section.importances is not None:
        md += ["Parameter importances (fANOVA, per method, on the metric):", "", table, ""]
    if section.plot is not None:
        md += [f"![hypervolume per configuration]({SEARCH_PNG})", ""]
    return md


def section_html(section: SearchSection, inline: Any) -> list[str]:
    body = ["<h2>Search</h2>", *[f"<p>{inline(line)}</p>" for line in section.lines]]
    if section.importances is not None:
        body += ["<p>Parameter importances (fANOVA, per method, on the metric):</p>",
                 section.importances.to_html(index=False, border=0, escape=True, classes="table")]
    if section.plot is not None:
        body.append(f'<img src="{SEARCH_PNG}" alt="{html.escape("hypervolume per configuration")}">')
    return body
