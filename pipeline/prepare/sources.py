"""A task's raw splits from whichever of the four sources `task.source` names.

Sources: `hub` (`pipeline.prepare.hub_datasets`), `glue_dir` (`pipeline.prepare.glue_dir`),
`files` (`pipeline.prepare.data_files`) and `synthetic` (`pipeline.prepare.synthetic`). Each ends
in the raw shape of `pipeline.prepare.rows`, validated before any tokenizing or training.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import datasets
import numpy as np

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.data_files import load_files, read_file
from pipeline.prepare.glue_dir import load_glue_dir
from pipeline.prepare.hub_datasets import hub_test_split, load_hub, resolved_task
from pipeline.prepare.rows import split_from_table
from pipeline.prepare.synthetic import load_synthetic
from pipeline.prepare.tasks import TaskSpec, task_spec


def load_raw(task_cfg: TaskConfig) -> datasets.DatasetDict:
    """The task's validated raw splits (train, dev[, dev_mismatched]), before any subsampling."""
    task_cfg, spec = resolved_task(task_cfg)
    loaders: dict[str, Callable[[TaskConfig, TaskSpec], dict[str, datasets.Dataset]]] = {
        "hub": load_hub,
        "glue_dir": load_glue_dir,
        "files": load_files,
        "synthetic": load_synthetic,
    }
    return datasets.DatasetDict(loaders[task_cfg.resolved_source()](task_cfg, spec))


def train_texts(raw: datasets.DatasetDict) -> list[str]:
    """Every training text, both sides of a pair: what an offline tokenizer is trained on."""
    train = raw["train"]
    return [text for column in ("text_a", "text_b") if column in train.column_names for text in train[column][:]]


def subsample(dataset: datasets.Dataset, max_samples: int | None, seed: int) -> datasets.Dataset:
    """A seeded random subset, kept in the original order; the same seed always picks the same rows."""
    if max_samples is None or max_samples >= len(dataset):
        return dataset
    chosen = np.random.default_rng(seed).choice(len(dataset), size=max_samples, replace=False)
    return dataset.select(np.sort(chosen))


def load_test_split(cfg: TaskConfig) -> datasets.Dataset:
    """`task.files.test` (or the hub split `task.splits.test` names), read and validated like train
    and dev. Only `drydock eval` reads it (the sweep never does), and only to score it, so a split
    without labels is refused with that reason rather than as a missing column."""
    if cfg.resolved_source() == "hub" and cfg.splits is not None and cfg.splits.test is not None:
        return hub_test_split(cfg)
    if cfg.files is None or not cfg.files.test:
        raise DataError(f"task {cfg.name} has no test split (set task.files.test to a labelled file)")
    spec = task_spec(cfg)
    path = Path(cfg.files.test)
    table = read_file(path, cfg.files.format, [*spec.text_columns, cfg.label_column])
    if cfg.label_column not in table.columns:
        raise DataError(f"{path}: the test split has no labels (no column {cfg.label_column!r}, task.label_column); it cannot be scored")
    return split_from_table(table, spec.text_columns, cfg.label_column, spec, "test")
