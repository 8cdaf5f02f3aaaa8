"""A dev set is known by its content: the tags a version carries name the task, the label set
and a digest of the rows, so two sweeps' metrics compete only on the same rows."""

from __future__ import annotations

import datasets

from pipeline.select.dev_set import DevSet, labels_text, rows_fingerprint


def rows(texts: list[str], labels: list[int]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"text_a": texts, "label": labels})


def test_the_fingerprint_follows_the_texts_labels_and_their_order():
    base = rows_fingerprint(rows(["good", "bad"], [1, 0]))
    assert len(base) == 16 and base == rows_fingerprint(rows(["good", "bad"], [1, 0]))
    assert base != rows_fingerprint(rows(["bad", "good"], [0, 1]))  # order
    assert base != rows_fingerprint(rows(["good", "bad"], [1, 1]))  # a label
    assert base != rows_fingerprint(rows(["good", "bad!"], [1, 0]))  # a text


def test_the_tags_and_the_description_name_the_data():
    dev = DevSet(task="sst2", labels=("negative", "positive"), fingerprint="3f2a", examples=872, metric_name="accuracy")
    assert dev.tags() == {"eval_task": "sst2", "eval_labels": '["negative", "positive"]', "eval_data": "3f2a",
                          "eval_split": "dev", "eval_examples": "872"}
    assert dev.describe() == "sst2 dev, 872 examples, data 3f2a"
    assert labels_text(None) == "regression"
