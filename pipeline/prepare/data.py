"""Task data: the GLUE registry, four sources, validation, and the tokenized Arrow cache.

Every source ends in the same raw shape, a `datasets.DatasetDict` with splits `train`, `dev`
(plus `dev_mismatched` for MNLI) and columns `text_a`, `text_b` (pair tasks only) and `label`
(an int64 index into the task's label names, or a float32 score for regression). Everything
downstream — tokenizer training, teacher fine-tuning, trials — reads that shape and never needs
to know where the data came from.

Sources (`task.source`):

- `hub`: `datasets.load_dataset(hub_path, hub_config or <GLUE config name>, revision=<commit>)`, at
  the commit `hub_revision` (default `main`) resolves to (`pipeline.prepare.hub`): the fingerprint
  holds that commit, so a push to the dataset is a change, and the data is loaded at it. A local
  folder in a hub layout has no commits: its files' bytes are fingerprinted instead. `task.splits`
  maps the task's splits onto the dataset's (or carves dev out of train); a custom task without
  `label_names` takes them from the dataset's ClassLabel column (docs/hub-datasets.md).
- `glue_dir`: the canonical GLUE TSV release, read with quoting disabled (SST-2 sentences hold
  lone quote characters; a quoting reader silently swallows rows and the counts drift).
- `files`: csv/tsv/jsonl/parquet with the column names given in the task config.
- `synthetic`: a generated task that a tiny model learns in a few hundred steps (smoke runs).

All user mistakes (missing file or column, unknown label, empty split, non-numeric score) raise
`DataError` naming the file and what was expected, before any tokenizing or training.

`prepare_data` tokenizes once and caches the result under `<cache_dir>/data-<fingerprint>/`.
The fingerprint hashes the bytes of the data files, so editing a file in place invalidates the
cache even when its size and mtime survive; the cache is written to a temporary folder and
renamed into place, so concurrent trials never read half a cache, with a manifest of its files'
sizes and hashes that every reuse checks (`pipeline.prepare.cache`): a damaged cache is rebuilt.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import random
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from transformers import PreTrainedTokenizerBase

from pipeline.config import CarvedSplit, TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.cache import (
    CacheDamaged,
    cache_problem,
    check_cache,
    discard,
    folder_digest,
    unreadable_as_damaged,
    write_manifest,
)
from pipeline.prepare.hub import COMMIT, resolve_revision
from pipeline.prepare.metrics import METRICS

# Bump when the cached layout or the tokenization changes, so stale caches are never reused.
CACHE_FORMAT = 1
SOURCE_FILE = "source.json"  # in a hub dataset's cache folder: the commit its rows came from, its label names

# ----------------------------------------------------------------------------------------------
# the task registry
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSpec:
    """What a task is, independent of where its data comes from.

    `text_columns` are the source's column names (the hub's for GLUE; a files source may rename
    them); `label_names` are in the hub's label order, so a label index means the same class for
    a teacher fine-tuned on the hub and a student trained from a GLUE directory. Regression tasks
    have no label names and `num_labels` 1. `dev_splits` lists every evaluation split.
    """

    name: str
    text_columns: tuple[str, ...]
    label_names: tuple[str, ...]
    num_labels: int
    regression: bool
    metrics: tuple[str, ...]
    primary_metric: str
    dev_splits: tuple[str, ...] = ("dev",)

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2


def _glue(name: str, text_columns: tuple[str, ...], label_names: tuple[str, ...], metrics: tuple[str, ...], **kw: Any) -> TaskSpec:
    regression = not label_names
    return TaskSpec(
        name=name,
        text_columns=text_columns,
        label_names=label_names,
        num_labels=1 if regression else len(label_names),
        regression=regression,
        metrics=metrics,
        primary_metric=metrics[0],
        **kw,
    )


# Primary metrics follow the GLUE paper's headline number per task: MCC for CoLA, F1 for MRPC and
# QQP, Pearson for STS-B (the first metric of each pair; `combined` is still reported alongside).
GLUE: dict[str, TaskSpec] = {
    "cola": _glue("cola", ("sentence",), ("unacceptable", "acceptable"), ("mcc",)),
    "sst2": _glue("sst2", ("sentence",), ("negative", "positive"), ("accuracy",)),
    "mrpc": _glue("mrpc", ("sentence1", "sentence2"), ("not_equivalent", "equivalent"), ("f1", "accuracy")),
    "stsb": _glue("stsb", ("sentence1", "sentence2"), (), ("pearson", "spearman")),
    "qqp": _glue("qqp", ("question1", "question2"), ("not_duplicate", "duplicate"), ("f1", "accuracy")),
    "mnli": _glue(
        "mnli",
        ("premise", "hypothesis"),
        ("entailment", "neutral", "contradiction"),
        ("accuracy",),
        dev_splits=("dev", "dev_mismatched"),
    ),
    "qnli": _glue("qnli", ("question", "sentence"), ("entailment", "not_entailment"), ("accuracy",)),
    "rte": _glue("rte", ("sentence1", "sentence2"), ("entailment", "not_entailment"), ("accuracy",)),
}


def task_spec(task_cfg: TaskConfig) -> TaskSpec:
    """The GLUE spec (with the config's column renames), or one built from the config fields."""
    if task_cfg.resolved_source() == "synthetic":
        return _synthetic_spec(task_cfg)
    if task_cfg.name in GLUE:
        return _glue_spec(task_cfg)
    return _custom_spec(task_cfg)


def _glue_spec(cfg: TaskConfig) -> TaskSpec:
    spec = GLUE[cfg.name]
    fixed = "GLUE's (in the hub's label order)"
    if cfg.label_names is not None and tuple(cfg.label_names) != spec.label_names:
        raise DataError(f"task.label_names for GLUE task {spec.name} must be {list(spec.label_names)} {fixed}, got {cfg.label_names}")
    if cfg.num_labels is not None and cfg.num_labels != spec.num_labels:
        raise DataError(f"task.num_labels for GLUE task {spec.name} must be {spec.num_labels}, got {cfg.num_labels}")
    if cfg.regression and not spec.regression:
        raise DataError(f"task.regression: GLUE task {spec.name} is a classification task")
    if cfg.text_columns:
        if len(cfg.text_columns) != len(spec.text_columns):
            raise DataError(f"task.text_columns: GLUE task {spec.name} needs {len(spec.text_columns)} text column(s), got {cfg.text_columns}")
        spec = replace(spec, text_columns=tuple(cfg.text_columns))
    if cfg.metrics:
        metrics = _check_metrics(cfg.metrics)
        spec = replace(spec, metrics=metrics, primary_metric=spec.primary_metric if spec.primary_metric in metrics else metrics[0])
    return spec


def _custom_spec(cfg: TaskConfig) -> TaskSpec:
    """A custom task's primary metric is the first one listed in `task.metrics`."""
    columns = tuple(cfg.text_columns or ())
    if not 1 <= len(columns) <= 2:
        raise DataError(f"task.text_columns: custom task {cfg.name} needs one or two text column names, got {list(columns)}")
    if cfg.regression:
        metrics = _check_metrics(cfg.metrics or ["pearson", "spearman"])
        return TaskSpec(cfg.name, columns, (), 1, True, metrics, metrics[0])
    label_names = tuple(cfg.label_names or ())
    num_labels = len(label_names) or cfg.num_labels
    if num_labels is None and cfg.resolved_source() == "hub":
        # every path that reads the data pins the task first; this is a config that skipped it
        raise DataError(f"task {cfg.name}: the label names of dataset {cfg.hub_path} are read from its ClassLabel column "
                        f"{cfg.label_column!r} when the task is pinned (pipeline.prepare.data.pinned_task), which this "
                        "task config was not; or set task.label_names")
    if num_labels is None:
        raise DataError(f"task {cfg.name}: set task.label_names (or task.num_labels when the labels are integers 0..n-1)")
    if label_names and cfg.num_labels is not None and cfg.num_labels != len(label_names):
        raise DataError(f"task.num_labels ({cfg.num_labels}) disagrees with the {len(label_names)} task.label_names")
    if num_labels < 2:
        raise DataError(f"task {cfg.name}: a classification task needs at least two labels, got {num_labels}")
    metrics = _check_metrics(cfg.metrics or ["accuracy"])
    # Integer-labelled tasks get their indices as names, so "0" and 0 both parse and id2label reads well.
    names = label_names or tuple(str(i) for i in range(num_labels))
    return TaskSpec(cfg.name, columns, names, num_labels, False, metrics, metrics[0])


def _synthetic_spec(cfg: TaskConfig) -> TaskSpec:
    settings = cfg.synthetic
    if settings.min_words > settings.max_words:
        raise DataError(f"task.synthetic.min_words ({settings.min_words}) exceeds task.synthetic.max_words ({settings.max_words})")
    metrics = _check_metrics(cfg.metrics or ["accuracy"])
    names = tuple(f"class_{i}" for i in range(settings.num_labels))
    return TaskSpec(cfg.name, ("text",), names, settings.num_labels, False, metrics, metrics[0])


def _check_metrics(names: Sequence[str]) -> tuple[str, ...]:
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise DataError(f"task.metrics: unknown metric(s) {', '.join(unknown)} (known: {', '.join(METRICS)})")
    return tuple(names)


# ----------------------------------------------------------------------------------------------
# raw splits
# ----------------------------------------------------------------------------------------------


def load_raw(task_cfg: TaskConfig) -> datasets.DatasetDict:
    """The task's validated raw splits (train, dev[, dev_mismatched]), before any subsampling."""
    task_cfg, spec = _resolved(task_cfg)
    loaders: dict[str, Callable[[TaskConfig, TaskSpec], dict[str, datasets.Dataset]]] = {
        "hub": _load_hub,
        "glue_dir": _load_glue_dir,
        "files": _load_files,
        "synthetic": _load_synthetic,
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


@dataclass(frozen=True)
class _Table:
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


def _split_from_table(
    table: _Table, text_columns: Sequence[str], label_column: str, spec: TaskSpec, split: str, published: bool = False
) -> datasets.Dataset:
    """`published`: a GLUE release or a hub dataset, whose empty texts are kept as published
    (GLUE's QQP has two empty questions; refusing them would refuse the benchmark itself)."""
    if table.num_rows == 0:
        raise DataError(f"{table.source}: the {split} split is empty (no data rows)")
    table.require([*text_columns, label_column])
    texts = [_texts(table, name, allow_empty=published) for name in text_columns]
    labels = _labels(table, label_column, spec)
    return _make_split(texts, labels, spec.regression)


def _texts(table: _Table, name: str, allow_empty: bool = False) -> list[str]:
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


def _labels(table: _Table, column: str, spec: TaskSpec) -> list[int] | list[float]:
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
    return score


def _make_split(texts: list[list[str]], labels: list[Any], regression: bool) -> datasets.Dataset:
    columns: dict[str, list[Any]] = {"text_a": texts[0]}
    features = {"text_a": datasets.Value("string")}
    if len(texts) == 2:
        columns["text_b"] = texts[1]
        features["text_b"] = datasets.Value("string")
    columns["label"] = labels
    features["label"] = datasets.Value("float32" if regression else "int64")
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


# --- hub ---------------------------------------------------------------------------------------

# Task split -> the hub split names it reads when `task.splits` does not say, the first present.
# GLUE's test splits have no labels and are never read unless `task.splits.test` names one.
_HUB_SPLITS = {
    "train": ("train",),
    "dev": ("validation_matched", "validation"),
    "dev_mismatched": ("validation_mismatched",),
}
_CARVE_STREAM = 0x63617276  # the carving's own random stream under task.sample_seed ("carv")


def _local_hub_folder(cfg: TaskConfig) -> Path | None:
    """`task.hub_path` naming a folder here (what `datasets.load_dataset` itself loads from before
    asking the hub): a copy in a hub layout, with files but no commits."""
    folder = Path(cfg.hub_path).expanduser()
    return folder if folder.is_dir() else None


def dataset_revision(cfg: TaskConfig) -> str | None:
    """The commit of the hub dataset `task.hub_revision` (default `main`) names now; None when the
    task does not read the hub, or reads a local folder (whose files' bytes are fingerprinted)."""
    if cfg.resolved_source() != "hub":
        return None
    folder = _local_hub_folder(cfg)
    if folder is not None:
        if cfg.hub_revision is not None:
            raise DataError(f"task.hub_revision: task.hub_path {cfg.hub_path} is a local folder, which has no revisions "
                            "(its files' bytes are what is fingerprinted); remove task.hub_revision")
        return None
    try:
        return resolve_revision(cfg.hub_path, cfg.hub_revision, repo_type="dataset", field="task.hub_revision", error=DataError)
    except DataError as e:
        raise DataError(f"could not load dataset {_hub_described(cfg)} from the Hugging Face hub ({e}); {_OFFLINE_HINT}") from None


def pinned_task(cfg: TaskConfig) -> TaskConfig:
    """`cfg` with what its hub dataset says now written in (other sources unchanged): the revision
    replaced by the commit it names, and a custom classification task's missing `label_names` read
    from the dataset's ClassLabel column at that commit. Resolved once, when the sweep starts
    (`pipeline.prepare.revisions.pin_revisions`), and handed on in the spec: the fingerprint, the
    rows loaded, the teacher's and students' `id2label`, the metrics and the Train workers (which
    read the prepared cache, never the dataset) cannot see two commits or two sets of names."""
    revision = dataset_revision(cfg)
    update: dict[str, Any] = {}
    if revision is not None and revision != cfg.hub_revision:
        update["hub_revision"] = revision
    if reads_hub_label_names(cfg):
        names = _hub_label_names(cfg, revision)
        if names is not None:
            update["label_names"] = list(names)
    return cfg.model_copy(update=update) if update else cfg


def reads_hub_label_names(cfg: TaskConfig) -> bool:
    """A custom hub classification task that gives no label names: the dataset's ClassLabel may."""
    return cfg.resolved_source() == "hub" and cfg.name not in GLUE and not cfg.regression and cfg.label_names is None


def _resolved(cfg: TaskConfig) -> tuple[TaskConfig, TaskSpec]:
    """The pinned config and its spec. A config wrong on its face fails before the hub is asked;
    one whose label names the dataset gives can only be checked once they are read."""
    if not reads_hub_label_names(cfg):
        task_spec(cfg)
    cfg = pinned_task(cfg)
    return cfg, task_spec(cfg)


def _hub_label_names(cfg: TaskConfig, revision: str | None) -> tuple[str, ...] | None:
    """The names of the label column's ClassLabel, from the split train reads; None when the
    column holds plain integers and `task.num_labels` says how many (they are then their names)."""
    described = _hub_described(cfg)
    hub = _hub_dataset(cfg, revision)
    name = _hub_sources(cfg, ("train",), hub, described)["train"]
    assert isinstance(name, str)  # only dev may be carved
    features = hub[name].features
    if cfg.label_column not in features:
        found = ", ".join(repr(c) for c in features) or "none"
        raise DataError(f"{described} split {name}: missing column {cfg.label_column!r} (task.label_column; columns found: {found})")
    feature = features[cfg.label_column]
    if not isinstance(feature, datasets.ClassLabel):
        if cfg.num_labels is not None:
            return None
        raise DataError(f"task.label_names: column {cfg.label_column!r} of dataset {described} holds {_feature_type(feature)}, "
                        "not a ClassLabel naming its classes; set task.label_names (or task.num_labels when the labels "
                        "are integers 0..n-1)")
    names = tuple(feature.names)
    if cfg.num_labels is not None and cfg.num_labels != len(names):
        raise DataError(f"task.num_labels ({cfg.num_labels}) disagrees with column {cfg.label_column!r} of dataset {described}, "
                        f"a ClassLabel of {len(names)}: {', '.join(names)}")
    return names


def _feature_type(feature: Any) -> str:
    return f"{feature.dtype} values" if isinstance(feature, datasets.Value) else f"a {type(feature).__name__} feature"


_OFFLINE_HINT = "offline, download the GLUE release and use `task.source: glue_dir` with `task.glue_dir`, or `task.source: files`"


def _hub_config_name(cfg: TaskConfig) -> str | None:
    """A custom dataset is loaded without a config name unless `task.hub_config` names one."""
    return cfg.hub_config or (cfg.name if cfg.name in GLUE else None)


def _hub_described(cfg: TaskConfig) -> str:
    config_name = _hub_config_name(cfg)
    return f"{cfg.hub_path}" + (f" (config {config_name})" if config_name else "")


def _hub_dataset(cfg: TaskConfig, revision: str | None) -> datasets.DatasetDict:
    """Every split of the dataset at `revision` (the resolved commit; None for a local folder)."""
    described = _hub_described(cfg)
    folder = _local_hub_folder(cfg)
    try:
        hub = datasets.load_dataset(str(folder or cfg.hub_path), _hub_config_name(cfg), revision=revision)
    except Exception as e:  # network, auth, unknown name: all mean "use local data instead"
        if folder is not None:
            raise DataError(f"task.hub_path: could not load the dataset in folder {folder} ({e.__class__.__name__}: {e}); "
                            "it should hold a hub dataset's files (data/train-*.parquet, ...)") from e
        raise DataError(
            f"could not load dataset {described} from the Hugging Face hub ({e.__class__.__name__}: {e}); {_OFFLINE_HINT}"
        ) from e
    if not isinstance(hub, datasets.DatasetDict):
        raise DataError(f"task.hub_path: {described} loaded as a {type(hub).__name__}, not a dataset with named splits")
    check_loaded_revision(hub, revision, described)
    return hub


def _hub_sources(cfg: TaskConfig, splits: Sequence[str], hub: datasets.DatasetDict, described: str) -> dict[str, str | CarvedSplit]:
    """The dataset split each task split reads (or the carving that makes it): `task.splits`,
    else the hub's usual names. A dataset without one says what it has and how to map it."""
    available = list(hub)
    shown = ", ".join(available) or "none"
    sources: dict[str, str | CarvedSplit] = {}
    missing = []
    for split in splits:
        given = getattr(cfg.splits, split, None) if cfg.splits is not None else None
        if given is None:
            default = next((name for name in _HUB_SPLITS[split] if name in hub), None)
            if default is None:
                missing.append(split)
            else:
                sources[split] = default
            continue
        name = given.from_ if isinstance(given, CarvedSplit) else given
        if name not in hub:
            field = f"task.splits.{split}" + (".from" if isinstance(given, CarvedSplit) else "")
            raise DataError(f"{field}: dataset {described} has no split {name!r} (its splits: {shown})")
        sources[split] = given
    if missing:
        train = sources.get("train", "train")
        others = [name for name in available if name != train]
        examples = [f"`{{{missing[0]}: {others[0]}}}`"] if others else []
        if "dev" in missing and isinstance(train, str) and train in hub:
            examples.append(f"a seeded share of {train}: `{{dev: {{from: {train}, fraction: 0.1}}}}`")
        raise DataError(f"dataset {described} has no split for the task's {', '.join(missing)} (its splits: {shown}); "
                        f"say which split each reads with task.splits" + (f", e.g. {' or '.join(examples)}" if examples else ""))
    return sources


def _carve(num_rows: int, fraction: float, seed: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(kept, carved) row indices of a split of `num_rows`, each in the split's order: `fraction`
    of the rows (at least one, never all) drawn on a stream of `seed` of their own, so the same seed
    carves the same rows whatever `max_train_samples` later picks from the rest."""
    if num_rows < 2:
        raise DataError(f"task.splits.dev: {where} has {num_rows} row(s); carving a dev split out of it needs at least 2")
    size = min(num_rows - 1, max(1, round(num_rows * fraction)))
    order = np.random.default_rng([seed, _CARVE_STREAM]).permutation(num_rows)
    return np.sort(order[size:]), np.sort(order[:size])


def _load_hub(cfg: TaskConfig, spec: TaskSpec) -> dict[str, datasets.Dataset]:
    described = _hub_described(cfg)
    hub = _hub_dataset(cfg, dataset_revision(cfg))
    sources = _hub_sources(cfg, ("train", *spec.dev_splits), hub, described)
    picked: dict[str, tuple[str, np.ndarray | None]] = {}
    for split, source in sources.items():
        if isinstance(source, CarvedSplit):
            kept, carved = _carve(len(hub[source.from_]), source.fraction, cfg.sample_seed, f"{described} split {source.from_}")
            picked[split] = (source.from_, carved)
            if sources["train"] == source.from_:  # the dev rows leave train
                picked["train"] = (source.from_, kept)
        else:
            picked.setdefault(split, (source, None))
    found = {}
    for split in ("train", *spec.dev_splits):
        name, indices = picked[split]
        rows = hub[name] if indices is None else hub[name].select(indices)
        _check_class_label(rows, cfg, spec, described)
        table = _hub_table(rows, f"{described} split {name}", indices)
        found[split] = _split_from_table(table, spec.text_columns, cfg.label_column, spec, split, published=True)
    return found


def _check_class_label(rows: datasets.Dataset, cfg: TaskConfig, spec: TaskSpec, described: str) -> None:
    """A ClassLabel's integers are indices into its names: the task's names must be the same, in
    the same order, or every label would silently mean another class. A ClassLabel built from a
    count alone (names "0".."n-1") names nothing: only its count must agree."""
    feature = rows.features.get(cfg.label_column)
    if spec.regression or not isinstance(feature, datasets.ClassLabel):
        return
    names = tuple(feature.names)
    whose = "task.label_names" if cfg.label_names is not None else f"task {spec.name}'s label names"
    if names == tuple(str(i) for i in range(len(names))):
        if len(names) != spec.num_labels:
            raise DataError(f"{whose} ({spec.num_labels}) disagree with column {cfg.label_column!r} of dataset {described}, "
                            f"a ClassLabel of {len(names)} classes")
        return
    if names != spec.label_names:
        raise DataError(f"{whose} {list(spec.label_names)} differ from the names of column {cfg.label_column!r} of dataset "
                        f"{described}, a ClassLabel {list(names)}: its labels are indices into those, so give the same names "
                        "in the same order, or leave task.label_names out to take the dataset's")


def check_loaded_revision(hub: datasets.DatasetDict, revision: str | None, described: str) -> None:
    """Offline, `datasets` ignores the revision asked for and loads the newest copy in its own
    cache, whose folder is named by the commit it came from: a copy of another commit would be
    trained under this commit's fingerprint, so it is refused instead."""
    for split in hub.values():
        for cached in split.cache_files:
            commit = Path(cached["filename"]).parent.name
            if revision is not None and COMMIT.fullmatch(commit) and commit != revision:
                raise DataError(
                    f"task.hub_revision: {described} resolves to commit {revision}, but the datasets cache holds commit "
                    f"{commit} ({Path(cached['filename']).parent}), the one datasets loads offline; load it once "
                    f"with the hub reachable, or set task.hub_revision: {commit}"
                )


def _hub_table(dataset: datasets.Dataset, source: str, indices: np.ndarray | None = None) -> _Table:
    """`indices`: the rows of a carved split, so an error names the row's index in the dataset's own split."""
    def locate(i: int) -> str:
        return f"row index {i if indices is None else int(indices[i])}"

    return _Table(source, dataset.column_names, len(dataset), lambda name: dataset[name][:], locate)


# --- GLUE directory ----------------------------------------------------------------------------


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


def _glue_files(cfg: TaskConfig) -> dict[str, Path]:
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


def _load_glue_dir(cfg: TaskConfig, spec: TaskSpec) -> dict[str, datasets.Dataset]:
    files = _glue_files(cfg)
    layout = _GLUE_LAYOUTS[spec.name]
    wanted = [*layout.text_columns, layout.label_column]
    return {
        split: _split_from_table(_read_delimited(path, "\t", csv.QUOTE_NONE, wanted, layout.names), layout.text_columns,
                                 layout.label_column, spec, split, published=True)
        for split, path in files.items()
    }


# --- files -------------------------------------------------------------------------------------

_SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


def _files(cfg: TaskConfig) -> dict[str, Path]:
    assert cfg.files is not None  # TaskConfig requires it for source 'files'
    files = {"train": Path(cfg.files.train), "dev": Path(cfg.files.dev)}
    for split, path in files.items():
        if not path.is_file():
            raise DataError(f"{path}: file not found (task.files.{split})")
    return files


def _load_files(cfg: TaskConfig, spec: TaskSpec) -> dict[str, datasets.Dataset]:
    assert cfg.files is not None
    wanted = [*spec.text_columns, cfg.label_column]
    return {
        split: _split_from_table(_read_file(path, cfg.files.format, wanted), spec.text_columns, cfg.label_column, spec, split)
        for split, path in _files(cfg).items()
    }


def load_test_split(cfg: TaskConfig) -> datasets.Dataset:
    """`task.files.test` (or the hub split `task.splits.test` names), read and validated like train
    and dev. Only `drydock eval` reads it (the sweep never does), and only to score it, so a split
    without labels is refused with that reason rather than as a missing column."""
    if cfg.resolved_source() == "hub" and cfg.splits is not None and cfg.splits.test is not None:
        return _hub_test_split(cfg)
    if cfg.files is None or not cfg.files.test:
        raise DataError(f"task {cfg.name} has no test split (set task.files.test to a labelled file)")
    spec = task_spec(cfg)
    path = Path(cfg.files.test)
    table = _read_file(path, cfg.files.format, [*spec.text_columns, cfg.label_column])
    if cfg.label_column not in table.columns:
        raise DataError(f"{path}: the test split has no labels (no column {cfg.label_column!r}, task.label_column); it cannot be scored")
    return _split_from_table(table, spec.text_columns, cfg.label_column, spec, "test")


def _hub_test_split(cfg: TaskConfig) -> datasets.Dataset:
    cfg, spec = _resolved(cfg)
    assert cfg.splits is not None and cfg.splits.test is not None
    described = _hub_described(cfg)
    hub = _hub_dataset(cfg, dataset_revision(cfg))
    name = _hub_sources(cfg, ("test",), hub, described)["test"]
    assert isinstance(name, str)  # only dev may be carved
    table = _hub_table(hub[name], f"{described} split {name}")
    if cfg.label_column not in table.columns:
        raise DataError(f"{table.source}: the test split has no labels (no column {cfg.label_column!r}, task.label_column); "
                        "it cannot be scored")
    _check_class_label(hub[name], cfg, spec, described)
    return _split_from_table(table, spec.text_columns, cfg.label_column, spec, "test", published=True)


def _read_file(path: Path, fmt: str | None, wanted: Sequence[str]) -> _Table:
    """csv is read with standard quoting; tsv, like GLUE's, with none (tabs never appear in fields)."""
    fmt = fmt or _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt == "csv":
        return _read_delimited(path, ",", csv.QUOTE_MINIMAL, wanted)
    if fmt == "tsv":
        return _read_delimited(path, "\t", csv.QUOTE_NONE, wanted)
    if fmt == "jsonl":
        return _read_jsonl(path)
    if fmt == "parquet":
        return _read_parquet(path, wanted)
    raise DataError(f"{path}: cannot tell the format from the suffix {path.suffix!r}; set task.files.format (csv, tsv, jsonl or parquet)")


def _read_delimited(path: Path, delimiter: str, quoting: Literal[0, 1, 2, 3], wanted: Sequence[str], names: Sequence[str] | None = None) -> _Table:
    """A delimited file; a header row names the columns unless `names` does (CoLA has no header).

    Only the `wanted` columns are kept: MNLI's parse-tree columns are most of its 400 MB.
    """
    with _open_text(path) as f:
        rows = _delimited_rows(path, csv.reader(f, delimiter=delimiter, quoting=quoting))
        header = list(names) if names is not None else next(rows, (0, []))[1]
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
    return _Table(str(path), header, len(lines), columns.__getitem__, lambda i: f"line {lines[i]}")


_EXTRA_FIELD_HINTS = {",": "a text holding a comma must be in double quotes", "\t": "a text may not hold a tab"}


def _delimited_rows(path: Path, reader: Any) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every non-blank row; a malformed line becomes a DataError."""
    try:
        for row in reader:
            if row:
                yield reader.line_num, row
    except UnicodeDecodeError as e:
        raise _not_utf8(path, e) from None
    except csv.Error as e:  # the reader has read the line it fails on
        raise DataError(f"{path}: line {reader.line_num}: cannot be parsed ({e})") from None


def _read_jsonl(path: Path) -> _Table:
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
    return _Table(str(path), list(columns), len(records), lambda name: [r.get(name) for r in records], lambda i: f"line {lines[i]}")


def _read_parquet(path: Path, wanted: Sequence[str]) -> _Table:
    try:
        names = pq.read_schema(path).names
        table = pq.read_table(path, columns=[name for name in wanted if name in names])
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from None
    return _Table(str(path), names, table.num_rows, lambda name: table.column(name).to_pylist(), lambda i: f"row index {i}")


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


def _read_utf8(path: Path) -> str:
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


# --- synthetic ---------------------------------------------------------------------------------

# Each class has its own cue words; every sentence carries one or more cues of its class (and none
# of another) amid shared filler, so a single word decides the label: separable by bag of words,
# yet the model must still learn to route that word to [CLS]. The generator uses `random.Random`
# seeded by a string, which gives the same sentences on every platform and Python version.
_CUE_WORDS = (
    ("sunny", "bright", "golden", "cheerful"),
    ("stormy", "gloomy", "bitter", "dreary"),
    ("rocket", "orbit", "planet", "comet"),
    ("violin", "melody", "chorus", "rhythm"),
    ("harvest", "orchard", "barley", "meadow"),
    ("glacier", "frost", "tundra", "blizzard"),
    ("market", "ledger", "invoice", "auction"),
    ("castle", "knight", "dragon", "throne"),
)
_FILLER_WORDS = (
    "the", "a", "this", "that", "one", "day", "story", "place", "thing", "people", "was", "is",
    "seemed", "felt", "and", "but", "with", "about", "very", "quite", "rather", "often", "then",
    "again", "we", "they", "it", "some", "many", "few", "old", "new", "small", "large", "here",
    "there", "today", "later", "around", "through",
)  # fmt: skip
_SYNTHETIC_VERSION = 1  # part of the fingerprint: bump when the generator changes


def _load_synthetic(cfg: TaskConfig, spec: TaskSpec) -> dict[str, datasets.Dataset]:
    settings = cfg.synthetic
    sizes = {"train": settings.num_train, "dev": settings.num_dev}
    splits = {}
    for split, size in sizes.items():
        rng = random.Random(f"drydock-synthetic/{cfg.sample_seed}/{split}")
        rows = [_synthetic_row(rng, spec.num_labels, settings.min_words, settings.max_words) for _ in range(size)]
        splits[split] = _make_split([[text for text, _ in rows]], [label for _, label in rows], regression=False)
    return splits


def _synthetic_row(rng: random.Random, num_labels: int, min_words: int, max_words: int) -> tuple[str, int]:
    label = rng.randrange(num_labels)
    length = rng.randint(min_words, max_words)
    num_cues = max(1, length // 4)
    words = [rng.choice(_FILLER_WORDS) for _ in range(length - num_cues)]
    for _ in range(num_cues):
        words.insert(rng.randint(0, len(words)), rng.choice(_CUE_WORDS[label]))
    return " ".join(words), label


# ----------------------------------------------------------------------------------------------
# fingerprint and tokenized cache
# ----------------------------------------------------------------------------------------------


@dataclass
class PreparedData:
    """Tokenized, unpadded splits ready for the loop (which pads each batch dynamically)."""

    task: TaskSpec
    train: datasets.Dataset
    dev: dict[str, datasets.Dataset]
    fingerprint: str
    num_train: int
    revision: str | None = None  # the hub dataset's commit (None: not from the hub)


_TOKEN_FEATURES = {
    "input_ids": datasets.List(datasets.Value("int64")),
    "attention_mask": datasets.List(datasets.Value("int64")),
    "token_type_ids": datasets.List(datasets.Value("int64")),
}


def data_fingerprint(task_cfg: TaskConfig, tokenizer: PreTrainedTokenizerBase) -> str:
    """A short content hash of everything that decides the tokenized splits' contents."""
    return _hash_json(_fingerprint_content(task_cfg, tokenizer))


def prepare_data(task_cfg: TaskConfig, tokenizer: PreTrainedTokenizerBase, cache_dir: Path) -> PreparedData:
    """Load, validate, subsample and tokenize the task, or reload it from the cache."""
    _configure_progress()
    task_cfg, spec = _resolved(task_cfg)
    fingerprint = data_fingerprint(task_cfg, tokenizer)

    def build(folder: Path) -> None:
        raw = load_raw(task_cfg)
        for split in ("train", *spec.dev_splits):
            limit = task_cfg.max_train_samples if split == "train" else task_cfg.max_eval_samples
            rows = subsample(raw[split], limit, task_cfg.sample_seed)
            _tokenize(rows, tokenizer, task_cfg.max_seq_length, f"{fingerprint}-{split}").save_to_disk(str(folder / split))
        if task_cfg.resolved_source() == "hub":  # the commit and the names travel with the cache (to Train workers, drydock.json)
            source = {"hub_path": task_cfg.hub_path, "revision": task_cfg.hub_revision, "label_names": task_cfg.label_names}
            (folder / SOURCE_FILE).write_text(json.dumps(source))

    # reused once per sweep here, by the process that can rebuild it: sizes and hashes
    return _load_cached(Path(cache_dir), data_folder_name(fingerprint), build, lambda f: load_prepared_data(task_cfg, f), deep=True)


def data_folder_name(fingerprint: str) -> str:
    """The cache folder of the tokenized splits with this fingerprint."""
    return f"data-{fingerprint}"


def load_prepared_data(task_cfg: TaskConfig, folder: Path) -> PreparedData:
    """The tokenized splits `prepare_data` cached in `folder`, without the source: a Train worker
    on another node has the cache (fetched from the work location), not the task's files.
    The folder is checked against its manifest's sizes first (a stat per file: this runs at every
    trial start); a damaged one is a `CacheDamaged` naming it (`prepare_data` rebuilds it).
    A hub task's label names read from its ClassLabel are in the cache too: a config that was not
    pinned (a resumed sweep's, which keeps only the commit) still gets the names it was built with."""
    check_cache(folder)
    with unreadable_as_damaged(folder):
        source = json.loads((folder / SOURCE_FILE).read_text()) if (folder / SOURCE_FILE).is_file() else {}
    if source.get("label_names") is not None and reads_hub_label_names(task_cfg):
        task_cfg = task_cfg.model_copy(update={"label_names": list(source["label_names"])})
    spec = task_spec(task_cfg)
    with unreadable_as_damaged(folder):
        train = datasets.load_from_disk(str(folder / "train"))
        dev = {split: datasets.load_from_disk(str(folder / split)) for split in spec.dev_splits}
    fingerprint = folder.name.removeprefix("data-")
    return PreparedData(task=spec, train=train, dev=dev, fingerprint=fingerprint, num_train=len(train), revision=source.get("revision"))


def prepare_unlabeled(
    task_cfg: TaskConfig,
    tokenizer: PreTrainedTokenizerBase,
    cache_dir: Path,
    max_samples: int | None,
    files: Sequence[str],
) -> datasets.Dataset:
    """Label-free text for distillation: a seeded subsample of the task's training texts (up to
    `max_samples`; `max_train_samples` does not apply) followed by every non-blank line of the
    extra text files, tokenized like `prepare_data` and cached the same way."""
    _configure_progress()
    task_cfg, _ = _resolved(task_cfg)  # a bad task config fails here, before any tokenizing
    extra = [Path(f) for f in files]
    for path in extra:
        if not path.is_file():
            raise DataError(f"{path}: file not found (extra unlabeled text)")
    content = _fingerprint_content(task_cfg, tokenizer)
    for unused in ("max_train_samples", "max_eval_samples"):
        del content[unused]
    content.update(kind="unlabeled", max_samples=max_samples, extra=[_file_digest(p) for p in extra])
    fingerprint = _hash_json(content)

    def build(folder: Path) -> None:
        task_rows = subsample(load_raw(task_cfg)["train"].remove_columns("label"), max_samples, task_cfg.sample_seed)
        parts = [_tokenize(task_rows, tokenizer, task_cfg.max_seq_length, f"{fingerprint}-task")]
        lines = [line.strip() for path in extra for line in _read_utf8(path).splitlines() if line.strip()]
        if lines:
            extra_rows = datasets.Dataset.from_dict({"text_a": lines}, features=datasets.Features({"text_a": datasets.Value("string")}))
            parts.append(_tokenize(extra_rows, tokenizer, task_cfg.max_seq_length, f"{fingerprint}-extra"))
        datasets.concatenate_datasets(parts).save_to_disk(str(folder))

    def load(folder: Path) -> datasets.Dataset:
        check_cache(folder)
        with unreadable_as_damaged(folder):
            return datasets.load_from_disk(str(folder))

    # reused at every distilling trial's start: sizes only (a stat per file), no hashing
    return _load_cached(Path(cache_dir), f"unlabeled-{fingerprint}", build, load, deep=False)


def _fingerprint_content(cfg: TaskConfig, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    return {
        "cache_format": CACHE_FORMAT,
        "task": cfg.name,
        "source": cfg.resolved_source(),
        "data": _data_digest(cfg),
        "text_columns": cfg.text_columns,
        "label_column": cfg.label_column,
        "label_names": cfg.label_names,
        "num_labels": cfg.num_labels,
        "regression": cfg.regression,
        "tokenizer": tokenizer_digest(tokenizer),
        "truncation_side": tokenizer.truncation_side,
        "max_seq_length": cfg.max_seq_length,
        "max_train_samples": cfg.max_train_samples,
        "max_eval_samples": cfg.max_eval_samples,
        "sample_seed": cfg.sample_seed,
        # only when given, so that the caches of every task without a mapping keep their keys
        **({"splits": cfg.splits.model_dump(mode="json", exclude_none=True)} if cfg.splits is not None else {}),
    }


def tokenizer_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    """The backend's vocabulary and pipeline, without the truncation/padding state that every
    `tokenizer(..., truncation=True)` call rewrites (else the fingerprint drifts after first use)."""
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    state.pop("truncation", None)
    state.pop("padding", None)
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def _data_digest(cfg: TaskConfig) -> Any:
    """File sources hash their bytes; the hub has no local bytes, so its name, its config and the
    commit its revision names now stand in (a push to the dataset changes the fingerprint). A
    local folder in a hub layout has bytes and no commits: its files are hashed."""
    source = cfg.resolved_source()
    if source == "glue_dir":
        return {split: _file_digest(path) for split, path in _glue_files(cfg).items()}
    if source == "files":
        assert cfg.files is not None
        return {"format": cfg.files.format, **{split: _file_digest(path) for split, path in _files(cfg).items()}}
    if source == "synthetic":
        return {"version": _SYNTHETIC_VERSION, **cfg.synthetic.model_dump(mode="json")}
    folder = _local_hub_folder(cfg)
    if folder is not None:
        dataset_revision(cfg)  # a revision given for a folder is refused, not ignored
        return {"hub_path": cfg.hub_path, "hub_config": cfg.hub_config, "folder": folder_digest(folder)}
    return {"hub_path": cfg.hub_path, "hub_config": cfg.hub_config, "hub_revision": dataset_revision(cfg)}


def _file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hash_json(content: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def _tokenize(rows: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, max_length: int, fingerprint: str) -> datasets.Dataset:
    """Truncate but never pad: the loop pads each batch to its own longest row."""
    pair = "text_b" in rows.column_names
    labelled = "label" in rows.column_names
    features = dict(_TOKEN_FEATURES)
    if labelled:
        features["labels"] = rows.features["label"]

    def encode(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        texts = (batch["text_a"], batch["text_b"]) if pair else (batch["text_a"],)
        encoded = tokenizer(*texts, truncation=True, max_length=max_length, return_token_type_ids=True, return_attention_mask=True)
        out = {name: encoded[name] for name in _TOKEN_FEATURES}
        if labelled:
            out["labels"] = batch["label"]
        return out

    return rows.map(
        encode,
        batched=True,
        remove_columns=rows.column_names,
        features=datasets.Features(features),
        keep_in_memory=True,
        new_fingerprint=fingerprint,  # ours already covers the data and tokenizer; skips hashing the function
        desc="tokenizing",
    )


def _load_cached(cache_dir: Path, name: str, build: Callable[[Path], None], load: Callable[[Path], Any], *, deep: bool) -> Any:
    """`load` of the cache `_cached` gives; a cache that verified but cannot be read (one written
    before manifests, truncated) is discarded and built again, once."""
    folder = _cached(cache_dir, name, build, deep=deep)
    try:
        return load(folder)
    except CacheDamaged as e:
        discard(folder, e.problem)
    return load(_cached(cache_dir, name, build, deep=deep))


def _cached(cache_dir: Path, name: str, build: Callable[[Path], None], *, deep: bool = True) -> Path:
    """`cache_dir/name`, built once: into a temporary folder renamed into place, so a reader only
    ever sees a complete cache. Two processes racing both build; the loser discards its copy.
    The build's manifest is written before the rename; an existing cache is reused only if it
    passes its check (`deep`: sha256 too, else sizes: `pipeline.prepare.cache`), else rebuilt."""
    final = cache_dir / name
    if final.is_dir():
        problem = cache_problem(final, deep=deep)
        if problem is None:
            return final
        discard(final, problem)
    cache_dir.mkdir(parents=True, exist_ok=True)
    scratch = cache_dir / f".{name}.{uuid.uuid4().hex}"  # not mkdtemp: its 0700 mode would stick
    scratch.mkdir()
    try:
        build(scratch)
        write_manifest(scratch)
        try:
            os.rename(scratch, final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def _configure_progress() -> None:
    """Progress bars help on a terminal and only clutter logs of Ray workers and CI."""
    if not sys.stderr.isatty():
        datasets.disable_progress_bars()
