"""Tables the `drydock` command prints."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

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
