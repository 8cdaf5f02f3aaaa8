"""The `glue_dir` source: the canonical GLUE TSV release.

Read with quoting disabled: SST-2 sentences hold lone quote characters, and a quoting reader
silently swallows rows, so the counts drift.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import datasets

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.data_files import read_delimited
from pipeline.prepare.rows import split_from_table
from pipeline.prepare.tasks import GLUE, TaskSpec


@dataclass(frozen=True)
class _GlueLayout:
    """Where a GLUE task's files live and which columns hold its texts and label."""

    folder: str
    text_columns: tuple[str, ...]
    label_column: str
    files: tuple[tuple[str, str], ...] = (("train", "train.tsv"), ("dev", "dev.tsv"))
    names: tuple[str, ...] | None = None  # column names of a file without a header row


_GLUE_LAYOUTS = {
    "cola": _GlueLayout("CoLA", ("sentence",), "label", names=("source", "label", "original_label", "sentence")),
    "sst2": _GlueLayout("SST-2", ("sentence",), "label"),
    "mrpc": _GlueLayout("MRPC", ("#1 String", "#2 String"), "Quality"),
    "stsb": _GlueLayout("STS-B", ("sentence1", "sentence2"), "score"),
    "qqp": _GlueLayout("QQP", ("question1", "question2"), "is_duplicate"),
    "mnli": _GlueLayout(
        "MNLI",
        ("sentence1", "sentence2"),
        "gold_label",
        files=(("train", "train.tsv"), ("dev", "dev_matched.tsv"), ("dev_mismatched", "dev_mismatched.tsv")),
    ),
    "qnli": _GlueLayout("QNLI", ("question", "sentence"), "label"),
    "rte": _GlueLayout("RTE", ("sentence1", "sentence2"), "label"),
}


def glue_files(cfg: TaskConfig) -> dict[str, Path]:
    """The task's TSV files; `glue_dir` may be the GLUE root or the task's own folder."""
    layout = _GLUE_LAYOUTS.get(cfg.name)
    if layout is None:  # reachable through `source: auto`, which TaskConfig does not check
        raise DataError(f"task {cfg.name}: a GLUE directory holds only the GLUE tasks ({', '.join(GLUE)}); use task.source: files")
    root = Path(cfg.glue_dir or "")
    folder = root / layout.folder
    if not (folder / "train.tsv").is_file() and (root / "train.tsv").is_file():
        folder = root
    files = {split: folder / name for split, name in layout.files}
    for path in files.values():
        if not path.is_file():
            raise DataError(
                f"{path}: file not found (task.glue_dir should be the GLUE folder holding {layout.folder}/, "
                f"or the {layout.folder} folder itself, with {', '.join(name for _, name in layout.files)})"
            )
    return files


def load_glue_dir(cfg: TaskConfig, spec: TaskSpec) -> dict[str, datasets.Dataset]:
    files = glue_files(cfg)
    layout = _GLUE_LAYOUTS[spec.name]
    wanted = [*layout.text_columns, layout.label_column]
    return {
        split: split_from_table(read_delimited(path, "\t", csv.QUOTE_NONE, wanted, layout.names), layout.text_columns,
                                 layout.label_column, spec, split, published=True)
        for split, path in files.items()
    }
