"""The task registry: what a task is (texts, labels, metrics), independent of where its data comes from.

The GLUE tasks are known by name, in the hub's label order, so a label index means the same class
whichever source the rows come from; a custom task is built from its config fields; a synthetic
task from its generator's settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.metrics import METRICS


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
                        f"{cfg.label_column!r} when the task is pinned (pipeline.prepare.hub_datasets.pinned_task), which this "
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
