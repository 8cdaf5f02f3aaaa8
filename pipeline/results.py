"""`<workdir>/<sweep>/results.parquet`: one row per trial, the contract every later stage reads.

Columns, a public contract (consumers read them by name): trial_id, method, seed, status,
error, params.<name>…, metric_name, metric, metrics.<name>…, teacher_metric, retention,
num_params, num_params_encoder, latency_ms, latency_p90_ms, speedup, latency_device,
train_seconds, steps, suggestion, pareto, student_path, mlflow_run_id.

`suggestion` is the configuration's place in the order the search took them: 1 for the first
configuration a searching algorithm asked its study for (`pipeline.search.searcher`), and for a
grid the configuration's place in the fixed list; every seed of a configuration has the same one.
Empty in rows written before the column existed.

`latency_ms`, `latency_p90_ms` and `speedup` are the trial's own export as timed in eager fp32
at the front's shape (p50, p90, and the teacher's p50 on the same node over the student's; when
the spec asks for runtime variants, they are variants.parquet's `torch` row, one timing per model,
its speedup the median within-round ratio: `pipeline.measure.eager`), and `latency_device` names the model of
the device it was timed on (a GPU's name, or the CPU's model); all four stay empty for a trial
whose export was not timed (by default only the seed of each configuration the registry
serves is: `pipeline.select.pareto`, "served_trials").

The file is rewritten atomically after every finished trial (write a temporary file, rename),
so a consumer reading it mid-sweep, or a sweep killed mid-write, never sees a torn file. Rows are
keyed by trial_id: a resumed sweep updates rows instead of duplicating them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pandas as pd

from pipeline.errors import DataError
from pipeline.workdir import RESULTS_FILE as RESULTS_FILE
from pipeline.workdir import atomic_path

LEADING = ["trial_id", "method", "seed", "status", "error"]
MIDDLE = ["metric_name", "metric"]
TRAILING = [
    "teacher_metric", "retention", "num_params", "num_params_encoder", "latency_ms", "latency_p90_ms",
    "speedup", "latency_device", "train_seconds", "steps", "suggestion", "pareto", "student_path", "mlflow_run_id",
]
NUMERIC = {"metric", "teacher_metric", "retention", "latency_ms", "latency_p90_ms", "speedup", "train_seconds"}
INTEGER = {"seed", "num_params", "num_params_encoder", "steps", "suggestion"}
TEXT = {"trial_id", "method", "status", "error", "metric_name", "latency_device", "student_path", "mlflow_run_id"}


def ordered_columns(columns: list[str]) -> list[str]:
    params = sorted(c for c in columns if c.startswith("params."))
    metrics = sorted(c for c in columns if c.startswith("metrics."))
    return LEADING + params + MIDDLE + metrics + TRAILING


def flatten(values: Mapping[str, Any], prefix: str = "", *, nested: bool = False, as_text: bool = False) -> dict[str, Any]:
    """`prefix + key` → value, for the two stores that hold no nesting; one function, so the
    results table and MLflow cannot drift apart on what a parameter is called.

    The results table (the defaults) gets one scalar column per parameter: scalars keep their
    type, so a column has its parameter's type, and a list, tuple or dict becomes one string
    (Python's `str`, as results.parquet has always written it). MLflow (`nested=True,
    as_text=True`) takes strings only: a non-empty dict opens into `key.sub` keys, a container
    left (list, tuple, empty dict) is JSON, so a method given with no parameters
    (`{"finetune": {}}` → `{"finetune": "{}"}`) is not lost, and any other value is `str`."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if nested and isinstance(v, dict) and v:
            out.update(flatten(v, key + ".", nested=True, as_text=as_text))
        elif isinstance(v, (list, tuple, dict)):
            out[key] = json.dumps(v) if as_text else str(v)
        else:
            out[key] = str(v) if as_text else v
    return out


def trial_row(
    trial_id: str,
    method: str,
    seed: int,
    params: dict[str, Any],
    status: str,
    outcome: dict[str, Any] | None = None,
    error: str | None = None,
    mlflow_run_id: str | None = None,
    metric_name: str | None = None,
    suggestion: int | None = None,
) -> dict[str, Any]:
    outcome = outcome or {}
    metric = outcome.get("metric")
    teacher_metric = outcome.get("teacher_metric")
    retention = metric / teacher_metric if metric is not None and teacher_metric else None
    row = {
        "trial_id": trial_id, "method": method, "seed": seed, "status": status, "error": error,
        "metric_name": outcome.get("metric_name", metric_name), "metric": metric,
        "teacher_metric": teacher_metric, "retention": retention,
        "num_params": outcome.get("num_params"), "num_params_encoder": outcome.get("num_params_encoder"),
        "latency_ms": None, "latency_p90_ms": None, "speedup": None, "latency_device": None, "pareto": None,
        "train_seconds": outcome.get("train_seconds"), "steps": outcome.get("steps"), "suggestion": suggestion,
        "student_path": outcome.get("student_path"), "mlflow_run_id": mlflow_run_id,
    }
    row.update(flatten(params, "params."))
    row.update(flatten(outcome.get("metrics", {}), "metrics."))
    return row


def to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    columns = ordered_columns(list(frame.columns)) if rows else ordered_columns([])
    frame = frame.reindex(columns=columns)
    for c in frame.columns:
        if c in NUMERIC or c.startswith("metrics."):
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
        elif c in INTEGER:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("Int64")
        elif c == "pareto":
            frame[c] = frame[c].astype("boolean")
        elif c in TEXT:
            frame[c] = frame[c].astype("string")
    return frame


def read_results(path: Path) -> pd.DataFrame:
    """The table (empty when there is none yet); one that cannot be read is a DataError naming
    the file, not pyarrow's traceback."""
    if not path.is_file():
        return to_frame([])
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise DataError(f"{path}: cannot be read as a results table ({reason}); restore it from the run's folder "
                        "under runs/ or the work location, or move it away to start the table anew") from None


def upsert(path: Path, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Insert or replace rows by trial_id and rewrite the file atomically."""
    existing = read_results(path)
    keep = existing[~existing["trial_id"].isin([r["trial_id"] for r in rows])] if len(existing) else existing
    # pandas-stubs types records' keys as Hashable; the table's column names are strings
    merged = to_frame(cast(list[dict[str, Any]], keep.to_dict("records")) + rows)
    write(path, merged)
    return merged


def write(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)
