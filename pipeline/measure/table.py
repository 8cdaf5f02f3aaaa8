"""`<workdir>/<name>/variants.parquet`, the measurement table: what the select stage measured of
every (configuration, runtime) variant, one row each, before any front is drawn over it.

Pure: no Ray, no MLflow, no model loading. The select stage builds, checks and scores every
runtime variant (`pipeline.measure.engines`), times them interleaved at each shape
(`pipeline.measure.interleaved`), and `measurement_rows` makes this table of the figures;
`pipeline.select.variants` marks its front and picks its champion; `write_variants` /
`read_variants` store it.

One row per (trial_id, runtime), the teacher's variants included (trial_id "teacher"). Columns,
a contract (consumers read them by name):

- `trial_id`, `runtime` (a name of `pipeline.measure.runtimes`),
  `metric_name`, `metric`: the variant's own score on the dev set (an int8 variant's, not its fp32
  model's).
- the front's shape (`selection.latency.front_shape`, named in `front_shape`): `latency_ms`,
  `latency_p90_ms` (p50 and p90 over the interleaved rounds), `latency_low_ms`,
  `latency_high_ms` (the ~95% interval of the p50); `speedup` (over the teacher in eager fp32,
  what the user runs today: the median over rounds of the within-round ratio) with `speedup_low`,
  `speedup_high`; `speedup_same_runtime` (over the teacher in this variant's runtime) with
  `speedup_same_runtime_low`, `speedup_same_runtime_high`.
- every shape timed, the front's included: the same ten figures as `<figure>@<batch>x<length>`
  (`latency_ms@1x128`, `speedup@32x64`, ...; `shape_column`), shape by shape in the order timed.
  A shape is written as `pipeline.config.Shape.label` writes it.
- `size_bytes` (the files a consumer ships: `Variant.size_bytes`), `peak_memory_bytes`
  (nullable: where measured), `parity_max_abs_diff` (against the eager fp32 logits:
  `check_parity`), `path` (the folder for torch, the `.onnx` file for ONNX Runtime),
  `measured_as` (at the front's shape: the runner actually timed when the variant shares its
  architecture and runtime with another one, `InterleavedResult.expand`; null when timed itself).
- `pareto` (`variant_front`), `front_shape`, `device`, `threads`.
- `error` (the variant could not be built, verified or scored: never a candidate) and
  `latency_error` ("<shape>: why" for each shape it has no timing at).

`pareto` is `pipeline.select.variants`' mark: null in the rows made here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.config import Shape
from pipeline.measure.interleaved import InterleavedResult
from pipeline.measure.job import TEACHER, VariantFacts, runner_name
from pipeline.measure.runtimes import EAGER
from pipeline.workdir import VARIANTS_FILE, atomic_path

SHAPE_SEP = "@"

LEADING = ["trial_id", "runtime", "metric_name", "metric"]
FIGURES = [
    "latency_ms", "latency_p90_ms", "latency_low_ms", "latency_high_ms", "speedup", "speedup_low", "speedup_high",
    "speedup_same_runtime", "speedup_same_runtime_low", "speedup_same_runtime_high",
]
TRAILING = [
    "size_bytes", "peak_memory_bytes", "parity_max_abs_diff", "path", "measured_as", "pareto", "front_shape", "device",
    "threads", "error", "latency_error",
]
INTEGER = {"size_bytes", "peak_memory_bytes", "threads"}
TEXT = {"trial_id", "runtime", "metric_name", "path", "measured_as", "front_shape", "device", "error", "latency_error"}


# ----------------------------------------------------------------------------------------------
# names
# ----------------------------------------------------------------------------------------------


def shape_label(shape: Shape | str | Sequence[int]) -> str:
    """"1x128" for a `Shape`, the text "1x128" (or "1 × 128") and (1, 128)."""
    if isinstance(shape, Shape):
        return shape.label
    if isinstance(shape, str):
        return Shape.model_validate(shape).label
    batch, length = shape
    return Shape(batch_size=batch, seq_length=length).label


def shape_column(figure: str, shape: Shape | str | Sequence[int]) -> str:
    """The column of one figure at one shape: `latency_ms@1x128`."""
    return f"{figure}{SHAPE_SEP}{shape_label(shape)}"


def table_shapes(table: pd.DataFrame) -> list[str]:
    """The shapes a table has columns for, in column order."""
    prefix = f"latency_ms{SHAPE_SEP}"
    return [str(c)[len(prefix):] for c in table.columns if str(c).startswith(prefix)]


def columns(shapes: Sequence[str]) -> list[str]:
    return LEADING + FIGURES + [shape_column(f, s) for s in shapes for f in FIGURES] + TRAILING


# ----------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------


def _figures(result: InterleavedResult, name: str, runtime: str) -> dict[str, Any] | None:
    """FIGURES of one runner in one measurement, plus `measured_as`; None when it was not timed."""
    timing = result.timings.get(name)
    if timing is None:
        return None
    speedups = result.speedups.get(name, {})
    out: dict[str, Any] = {"latency_ms": timing.p50_ms, "latency_p90_ms": timing.p90_ms, "latency_low_ms": timing.low_ms,
                           "latency_high_ms": timing.high_ms, "measured_as": timing.measured_as}
    for column, reference in (("speedup", runner_name(TEACHER, EAGER)), ("speedup_same_runtime", runner_name(TEACHER, runtime))):
        speedup = speedups.get(reference)
        out[column] = speedup.median if speedup is not None else math.nan
        out[f"{column}_low"] = speedup.low if speedup is not None else math.nan
        out[f"{column}_high"] = speedup.high if speedup is not None else math.nan
    return out


def _row(fact: VariantFacts, measurements: Mapping[str, InterleavedResult], front: str, device: str,
         threads: int | None) -> dict[str, Any]:
    name = runner_name(fact.trial_id, fact.runtime)
    row: dict[str, Any] = {
        "trial_id": fact.trial_id, "runtime": fact.runtime, "metric_name": fact.metric_name, "metric": fact.metric,
        "size_bytes": fact.size_bytes, "peak_memory_bytes": fact.peak_memory_bytes,
        "parity_max_abs_diff": fact.parity_max_abs_diff, "path": fact.path, "front_shape": front, "device": device,
        "threads": threads, "error": fact.error, "pareto": None, "measured_as": None,
    }
    untimed = []
    for label, result in measurements.items():
        figures = _figures(result, name, fact.runtime)
        if figures is None:
            untimed.append(f"{label}: {result.errors.get(name, 'not timed')}")
            figures = {}
        row.update({shape_column(f, label): figures.get(f, math.nan) for f in FIGURES})
        if label == front:
            row.update({f: figures.get(f, math.nan) for f in FIGURES})
            row["measured_as"] = figures.get("measured_as")
    row["latency_error"] = "; ".join(untimed) or None
    return row


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """The table's dtypes: float64 figures, nullable Int64 counts, strings, a nullable boolean
    `pareto`; the columns in contract order (`columns`), any others the caller added after them,
    untouched."""
    known = columns(table_shapes(frame))
    frame = frame.reindex(columns=known + [c for c in frame.columns if c not in known])
    for c in known:
        if c in INTEGER:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("Int64")
        elif c in TEXT:
            frame[c] = frame[c].astype("string")
        elif c == "pareto":
            frame[c] = frame[c].astype("boolean")
        else:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    return frame


def measurement_rows(
    facts: Sequence[VariantFacts],
    measurements: Mapping[str, InterleavedResult] | Mapping[Shape, InterleavedResult],
    *,
    front_shape: Shape | str,
    device: str,
    threads: int | None,
) -> pd.DataFrame:
    """The table (the module docstring lists its columns), `pareto` null.

    `facts`: one per variant, the teacher's first by convention (rows keep their order).
    `measurements`: one `InterleavedResult` per shape (key: a `Shape` or its label), expanded to
    every variant (`InterleavedResult.expand`), its timings keyed by `runner_name` and its
    speedups over the references "teacher/torch" and "teacher/<runtime>". `front_shape` must be
    one of them. A variant missing from a measurement gets empty figures at that shape (and a
    `latency_error` saying why, from the measurement's `errors`)."""
    by_label = {shape_label(shape): result for shape, result in measurements.items()}
    front = shape_label(front_shape)
    if front not in by_label:
        raise ValueError(f"front shape {front} was not measured (shapes measured: {', '.join(by_label) or 'none'})")
    seen: set[tuple[str, str]] = set()
    for fact in facts:
        if (fact.trial_id, fact.runtime) in seen:
            raise ValueError(f"{runner_name(fact.trial_id, fact.runtime)}: given twice")
        seen.add((fact.trial_id, fact.runtime))
    rows = [_row(fact, by_label, front, device, threads) for fact in facts]
    return typed(pd.DataFrame(rows, columns=columns(list(by_label))))


# ----------------------------------------------------------------------------------------------
# the file
# ----------------------------------------------------------------------------------------------


def variants_path(sweep_dir: Path) -> Path:
    """`<workdir>/<name>/variants.parquet`."""
    return Path(sweep_dir) / VARIANTS_FILE


def write_variants(path: Path, table: pd.DataFrame) -> None:
    """Atomically, as results.parquet is written: a temporary file beside it, then a rename, so a
    reader never sees a torn file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        typed(table).to_parquet(tmp, index=False)


def read_variants(path: Path) -> pd.DataFrame:
    """The table, typed; an empty one (the shape-free columns) when the file is not there."""
    path = Path(path)
    return typed(pd.read_parquet(path)) if path.is_file() else typed(pd.DataFrame(columns=columns([])))
