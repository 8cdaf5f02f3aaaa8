"""The task registry: GLUE follows the hub, custom tasks are built from their config."""

from __future__ import annotations

import pytest

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.sources import load_raw
from pipeline.prepare.tasks import GLUE, task_spec
from tests.unit.prepare.task_files import (
    files_cfg,
    glue_cfg,
    write_rows,
)


def test_registry_follows_the_hub():
    assert set(GLUE) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"}
    assert GLUE["mnli"].label_names == ("entailment", "neutral", "contradiction")
    assert GLUE["mnli"].dev_splits == ("dev", "dev_mismatched")
    assert GLUE["rte"].label_names == ("entailment", "not_entailment")
    assert (GLUE["stsb"].num_labels, GLUE["stsb"].regression, GLUE["stsb"].primary_metric) == (1, True, "pearson")
    assert (GLUE["mrpc"].metrics, GLUE["mrpc"].primary_metric) == (("f1", "accuracy"), "f1")
    assert GLUE["cola"].primary_metric == "mcc"
    assert all(spec.is_pair == (len(spec.text_columns) == 2) for spec in GLUE.values())


def test_glue_task_from_files_defaults_to_the_hub_column_names(tmp_path):
    rows = [{"sentence1": "a", "sentence2": "b", "label": "entailment"}, {"sentence1": "c", "sentence2": "d", "label": "not_entailment"}]
    cfg = TaskConfig(
        name="rte",
        source="files",
        files={"train": str(write_rows(tmp_path / "t.jsonl", rows, "jsonl")), "dev": str(write_rows(tmp_path / "d.jsonl", rows, "jsonl"))},
    )
    assert task_spec(cfg).text_columns == ("sentence1", "sentence2")
    assert load_raw(cfg)["train"]["label"][:] == [0, 1]


def test_custom_integer_labels_need_only_num_labels(tmp_path):
    rows = [{"text": "x", "label": 0}, {"text": "y", "label": 2}]
    cfg = files_cfg(tmp_path, "parquet", rows, rows, text_columns=["text"], label_column="label", label_names=None, num_labels=3)
    assert task_spec(cfg).label_names == ("0", "1", "2")
    assert load_raw(cfg)["train"]["label"][:] == [0, 2]


def test_custom_task_needs_its_labels():
    """Files carry no label names; a hub dataset's ClassLabel column may (test_hub_datasets.py)."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="needs task.label_names or task.num_labels"):
        TaskConfig(name="qa", source="files", files={"train": "a.csv", "dev": "b.csv"}, text_columns=["q"])
    assert TaskConfig(name="qa", source="hub", hub_path="x/y", text_columns=["q"]).label_names is None


def test_glue_task_rejects_a_different_label_order(tmp_path):
    with pytest.raises(DataError, match="hub's label order"):
        task_spec(glue_cfg("rte", tmp_path, label_names=["not_entailment", "entailment"]))


def test_auto_source_with_a_custom_task_never_reads_a_glue_dir(tmp_path):
    cfg = TaskConfig(name="qa", source="auto", glue_dir=str(tmp_path), text_columns=["q"], label_names=["a", "b"])
    assert cfg.resolved_source() == "hub"
