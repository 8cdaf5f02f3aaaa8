"""The `files` source: csv/tsv/jsonl/parquet files with the column names the task config gives.

Each reader turns a file into a `Table` that knows each row's line (or row index), so every
mistake found later names where it is; a byte that is not UTF-8 is reported at its own line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.rows import Table, split_from_table
from pipeline.prepare.tasks import TaskSpec

_SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


def source_files(cfg: TaskConfig) -> dict[str, Path]:
    assert cfg.files is not None  # TaskConfig requires it for source 'files'
    files = {"train": Path(cfg.files.train), "dev": Path(cfg.files.dev)}
    for split, path in files.items():
        if not path.is_file():
            raise DataError(f"{path}: file not found (task.files.{split})")
    return files


def load_files(cfg: TaskConfig, spec: TaskSpec) -> dict[str, datasets.Dataset]:
    assert cfg.files is not None
    wanted = [*spec.text_columns, cfg.label_column]
    return {
        split: split_from_table(read_file(path, cfg.files.format, wanted), spec.text_columns, cfg.label_column, spec, split)
        for split, path in source_files(cfg).items()
    }



def read_file(path: Path, fmt: str | None, wanted: Sequence[str]) -> Table:
    """csv is read with standard quoting; tsv, like GLUE's, with none (tabs never appear in fields)."""
    fmt = fmt or _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt == "csv":
        return read_delimited(path, ",", csv.QUOTE_MINIMAL, wanted)
    if fmt == "tsv":
        return read_delimited(path, "\t", csv.QUOTE_NONE, wanted)
    if fmt == "jsonl":
        return _read_jsonl(path)
    if fmt == "parquet":
        return _read_parquet(path, wanted)
    raise DataError(f"{path}: cannot tell the format from the suffix {path.suffix!r}; set task.files.format (csv, tsv, jsonl or parquet)")


def read_delimited(path: Path, delimiter: str, quoting: Literal[0, 1, 2, 3], wanted: Sequence[str], names: Sequence[str] | None = None) -> Table:
    """A delimited file; a header row names the columns unless `names` does (CoLA has no header).

    Only the `wanted` columns are kept: MNLI's parse-tree columns are most of its 400 MB.
    """
    with _open_text(path) as f:
        # strict: a quote inside an unquoted text, or text after a closing quote, is an error, not a guess
        rows = _delimited_rows(path, csv.reader(f, delimiter=delimiter, quoting=quoting, strict=True))
        header = list(names) if names is not None else next(rows, (0, []))[1]
        for name in wanted:
            if header.count(name) > 1:
                where = [i + 1 for i, h in enumerate(header) if h == name]
                raise DataError(f"{path}: line 1: the header names {name} twice (columns {where[0]} and {where[1]}); "
                                "which one is meant cannot be told")
        present = [name for name in wanted if name in header]
        positions = [header.index(name) for name in present]
        needed = max(positions, default=-1) + 1
        columns: dict[str, list[str]] = {name: [] for name in present}
        lines: list[int] = []
        for line, row in rows:
            # a short row lacks a column read; a long one (beyond empty trailing fields) would lose a field
            if len(row) < needed or any(field.strip() for field in row[len(header):]):
                hint = "" if len(row) < needed else f": {_EXTRA_FIELD_HINTS[delimiter]}"
                raise DataError(f"{path}: line {line}: has {len(row)} fields, expected {len(header)} ({', '.join(header)}){hint}")
            for name, j in zip(present, positions):
                columns[name].append(row[j])
            lines.append(line)
    return Table(str(path), header, len(lines), columns.__getitem__, lambda i: f"line {lines[i]}")


_EXTRA_FIELD_HINTS = {",": "a text holding a comma must be in double quotes", "\t": "a text may not hold a tab"}


def _delimited_rows(path: Path, reader: Any) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every non-blank row; a malformed line becomes a DataError."""
    try:
        last = 0  # the line the previous record ended on
        for row in reader:
            if row and reader.line_num > last + 1:  # a quoted field held a line break
                raise DataError(f"{path}: line {last + 1}: a quoted text runs on to line {reader.line_num} (a quote left open?); "
                                "texts may not span lines: close the quote, or replace the line breaks inside texts with spaces")
            last = reader.line_num
            if row:
                yield reader.line_num, row
    except UnicodeDecodeError as e:
        raise _not_utf8(path, e) from None
    except csv.Error as e:  # the reader has read the line it fails on
        raise DataError(f"{path}: line {reader.line_num}: cannot be parsed ({e})") from None


def _read_jsonl(path: Path) -> Table:
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    columns: dict[str, None] = {}  # ordered set: columns in order of first appearance
    with _open_text(path) as f:
        for number, line in _numbered_lines(path, f):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {number}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}: line {number}: expected a JSON object, got {type(record).__name__}")
            records.append(record)
            lines.append(number)
            columns.update(dict.fromkeys(record))
    return Table(str(path), list(columns), len(records), lambda name: [r.get(name) for r in records], lambda i: f"line {lines[i]}")


def _read_parquet(path: Path, wanted: Sequence[str]) -> Table:
    try:
        names = pq.read_schema(path).names
        table = pq.read_table(path, columns=[name for name in wanted if name in names])
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from None
    return Table(str(path), names, table.num_rows, lambda name: table.column(name).to_pylist(), lambda i: f"row index {i}")


def _open_text(path: Path):
    """utf-8-sig: Microsoft's MRPC files (and Excel exports) may start with a byte-order mark."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    return path.open(encoding="utf-8-sig", newline="")


def _numbered_lines(path: Path, f: Any) -> Iterator[tuple[int, str]]:
    """(1-based number, line) of a file opened by `_open_text`, a byte that is not UTF-8 a DataError."""
    try:
        yield from enumerate(f, start=1)
    except UnicodeDecodeError as e:
        raise _not_utf8(path, e) from None


def read_utf8(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(path, e) from None


def _not_utf8(path: Path, error: UnicodeDecodeError) -> DataError:
    """The line and offset of the first byte that is not UTF-8. The text layer decodes a file in
    blocks of kilobytes, so the line a reader had reached says nothing about where the byte is:
    the file is read again, as bytes, line by line (a newline never falls inside a UTF-8 character)."""
    offset = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return DataError(f"{path}: line {number}: byte {offset + e.start} (0x{raw[e.start]:02x}) is not UTF-8; "
                                 "save the file as UTF-8")
            offset += len(raw)
    return DataError(f"{path}: not UTF-8 text ({error.reason})")
