"""What the prepare stage hands the methods: the task as `methods.base.TaskInfo`."""

from __future__ import annotations

import datasets

from methods.base import TaskInfo
from pipeline.prepare.stage import task_info
from pipeline.prepare.tasks import GLUE
from pipeline.prepare.tokenized import PreparedData


def prepared(task) -> PreparedData:
    empty = datasets.Dataset.from_dict({"input_ids": []})
    return PreparedData(task=task, train=empty, dev={"dev": empty}, fingerprint="f", num_train=0)


def test_task_info_carries_the_labels_in_the_hubs_order():
    assert task_info(prepared(GLUE["mnli"])) == TaskInfo("mnli", 3, False, ("entailment", "neutral", "contradiction"))


def test_a_regression_task_has_one_output_and_no_label_names():
    assert task_info(prepared(GLUE["stsb"])) == TaskInfo("stsb", 1, True, ())
