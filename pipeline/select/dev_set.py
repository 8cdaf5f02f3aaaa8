"""Which data a registered version's numbers were measured on.

A metric means something only beside the rows it was computed on: a champion scored 0.95 on an
easy dev set and a challenger scored 0.80 on a harder one say nothing about each other. So every
registered version records the identity of its dev set in its tags (`DevSet.tags`), and the
champion policy (`pipeline.select.champion`) compares two versions on recorded figures only when
they were measured on the same rows; otherwise both are re-scored on this sweep's dev set.

The identity is a digest of the raw rows the sweep scored (texts and labels after the seeded
`max_eval_samples` subsample, `pipeline.select.evaluate.labelled_split`), not of the tokenized
cache: the cache's fingerprint also covers the training split, the tokenizer and the sequence
length, none of which changes what a dev score means to a consumer who sends text. The task and
its label set are recorded beside it: versions of another task or another label set never
compete for the alias (their label indices mean different classes).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import datasets

    from pipeline.config import SweepSpec

DEV_SPLIT = "dev"  # the split the sweep's metric (and the front) is computed on
REGRESSION = "regression"  # `eval_labels` of a regression task, which has no label set

# the version tags that name the data its `metric` was measured on
TASK_TAG, LABELS_TAG, DATA_TAG, SPLIT_TAG, EXAMPLES_TAG = "eval_task", "eval_labels", "eval_data", "eval_split", "eval_examples"


@dataclass(frozen=True)
class DevSet:
    """The dev rows a sweep scores its students on, by content."""

    task: str
    labels: tuple[str, ...] | None  # None: a regression task
    fingerprint: str
    examples: int
    metric_name: str
    split: str = DEV_SPLIT

    def tags(self) -> dict[str, str]:
        return {
            TASK_TAG: self.task,
            LABELS_TAG: labels_text(self.labels),
            DATA_TAG: self.fingerprint,
            SPLIT_TAG: self.split,
            EXAMPLES_TAG: str(self.examples),
        }

    def describe(self) -> str:
        """`sst2 dev, 872 examples, data 3f2a…`: how the decision log names it."""
        return f"{self.task} {self.split}, {self.examples} examples, data {self.fingerprint}"


def labels_text(labels: tuple[str, ...] | None) -> str:
    return REGRESSION if labels is None else json.dumps(list(labels))


def rows_fingerprint(rows: datasets.Dataset) -> str:
    """A digest of the texts and labels, in order (the subsample keeps the source's order)."""
    digest = hashlib.sha256()
    for column in ("text_a", "text_b", "label"):
        if column in rows.column_names:
            digest.update(column.encode())
            digest.update(json.dumps(rows[column][:]).encode())
    return digest.hexdigest()[:16]


def dev_set_of(spec: SweepSpec, rows: datasets.Dataset) -> DevSet:
    from pipeline.prepare.tasks import task_spec

    task = task_spec(spec.task)
    labels = None if task.regression else tuple(task.label_names)
    return DevSet(task=task.name, labels=labels, fingerprint=rows_fingerprint(rows), examples=len(rows),
                  metric_name=task.primary_metric)
