"""The raw shape every source ends in, and the checks each row passes on the way.

A `datasets.DatasetDict` with splits `train`, `dev` (plus `dev_mismatched` for MNLI) and columns
`text_a`, `text_b` (pair tasks only) and `label` (an int64 index into the task's label names, or a
float32 score for regression). Everything downstream — tokenizer training, teacher fine-tuning,
trials — reads that shape and never needs to know where the data came from.

All user mistakes (missing column, unknown label, empty split, non-numeric score, a text that is
not text) raise `DataError` naming the file, the row and what was expected, before any
tokenizing or training.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np

from pipeline.errors import DataError
from pipeline.prepare.tasks import TaskSpec


@dataclass(frozen=True)
class Table:
    """Rows of one file or hub split, with where each row came from for error messages."""

    source: str  # the file path or "dataset (split)"
    columns: list[str]
    num_rows: int
    get: Callable[[str], list[Any]]
    locate: Callable[[int], str]  # text files: 1-based "line 12"; tables: 0-based "row index 11"

    def require(self, names: Sequence[str]) -> None:
        """Every missing column in one message, before any row is parsed."""
        missing = [name for name in names if name not in self.columns]
        if missing:
            found = ", ".join(repr(c) for c in self.columns) or "none"
            wanted = ", ".join(repr(m) for m in missing)
            raise DataError(f"{self.source}: missing column {wanted} (columns found: {found})")

    def column(self, name: str) -> list[Any]:
        self.require([name])
        return self.get(name)

    def where(self, index: int) -> str:
        return f"{self.source}: {self.locate(index)}"


def split_from_table(
    table: Table, text_columns: Sequence[str], label_column: str, spec: TaskSpec, split: str, published: bool = False
) -> datasets.Dataset:
    """`published`: a GLUE release or a hub dataset, whose empty texts are kept as published
    (GLUE's QQP has two empty questions; refusing them would refuse the benchmark itself)."""
    if table.num_rows == 0:
        raise DataError(f"{table.source}: the {split} split is empty (no data rows)")
    table.require([*text_columns, label_column])
    texts = [_texts(table, name, allow_empty=published) for name in text_columns]
    labels = _labels(table, label_column, spec)
    return make_split(texts, labels, spec.regression)


def _texts(table: Table, name: str, allow_empty: bool = False) -> list[str]:
    """Every value must be a string (a number or an object in a text column is a wrong column or
    a broken row, never text to stringify) and, in the user's own files, hold more than spaces."""
    values = table.column(name)
    for i, value in enumerate(values):
        if value is None:
            raise DataError(f"{table.where(i)}: text column {name!r} is empty (null)")
        if not isinstance(value, str):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:50] + "…"
            raise DataError(f"{table.where(i)}: text column {name!r} holds {type(value).__name__} {shown}, not text")
        if not allow_empty and not value.strip():
            raise DataError(f"{table.where(i)}: text column {name!r} is {'only whitespace' if value else 'empty'} "
                            "(give the row its text, or remove it)")
    return values


def _labels(table: Table, column: str, spec: TaskSpec) -> list[int] | list[float]:
    """Parse each label once per distinct raw value: a 400k-row split has only a handful."""
    parse = _parse_score if spec.regression else _label_parser(spec)
    parsed: dict[Any, Any] = {}
    out = []
    for i, value in enumerate(table.column(column)):
        key = (type(value), value)
        if key not in parsed:
            try:
                parsed[key] = parse(value)
            except ValueError as e:
                raise DataError(f"{table.where(i)}: {e}") from None
        out.append(parsed[key])
    return out


def _label_parser(spec: TaskSpec) -> Callable[[Any], int]:
    """Label names map to their index; integers (or integer strings) in range are indices already."""
    index_of = {name: i for i, name in enumerate(spec.label_names)}
    allowed = f"{', '.join(spec.label_names)}, or an index 0-{spec.num_labels - 1}"

    def parse(value: Any) -> int:
        if isinstance(value, str) and value in index_of:
            return index_of[value]
        index = _as_int(value)
        if index is None or not 0 <= index < spec.num_labels:
            raise ValueError(f"label {value!r} is not one of the task's labels ({allowed})")
        return index

    return parse


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _parse_score(value: Any) -> float:
    try:
        score = float(value) if not isinstance(value, bool) and value is not None else math.nan
    except (TypeError, ValueError):
        score = math.nan
    if not math.isfinite(score):
        raise ValueError(f"label {value!r} is not a number (the task is a regression task)")
    if abs(score) > MAX_SCORE:
        raise ValueError(f"label {value!r} is beyond ±{MAX_SCORE:.0e}: training's float32 squared error would overflow "
                         "(float32 ends near 3.4e38); scale the scores")
    return score


# The largest regression score taken: its square (the MSE loss, summed over a batch) stays far
# inside float32, which ends near 3.4e38; beyond, a loss of inf at the first step looked like a
# learning rate too high.
MAX_SCORE = 1e15


def make_split(texts: list[list[str]], labels: list[Any], regression: bool) -> datasets.Dataset:
    columns: dict[str, list[Any]] = {"text_a": texts[0]}
    features = {"text_a": datasets.Value("string")}
    if len(texts) == 2:
        columns["text_b"] = texts[1]
        features["text_b"] = datasets.Value("string")
    columns["label"] = labels
    features["label"] = datasets.Value("float32" if regression else "int64")
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))
