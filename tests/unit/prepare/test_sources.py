"""A task's raw splits: the test split eval scores, seeded subsampling, the texts a tokenizer learns."""

from __future__ import annotations

import datasets
import pytest

from pipeline.errors import DataError
from pipeline.prepare import sources
from pipeline.prepare.sources import load_raw, subsample, train_texts
from tests.unit.prepare.task_files import (
    ROWS,
    files_cfg,
    glue_cfg,
    write_glue_task,
    write_rows,
)


def test_a_labelled_test_file_is_read_like_train_and_dev(tmp_path):
    cfg = files_cfg(tmp_path, "csv")
    labelled = write_rows(tmp_path / "test.csv", ROWS[1:], "csv")
    split = sources.load_test_split(cfg.model_copy(update={"files": cfg.files.model_copy(update={"test": str(labelled)})}))
    assert split["text_a"][:] == ["is it bad?", "maybe?"] and split["text_b"][:] == ["no", "who knows"]
    assert split["label"][:] == [0, 1]


def test_a_test_file_without_labels_cannot_be_scored(tmp_path):
    cfg = files_cfg(tmp_path, "jsonl")
    unlabelled = write_rows(tmp_path / "test.jsonl", [{"question": "q?", "answer": "a"}], "jsonl")
    with pytest.raises(DataError, match=r"test\.jsonl: the test split has no labels \(no column 'verdict', task\.label_column\); "
                                        r"it cannot be scored"):
        sources.load_test_split(cfg.model_copy(update={"files": cfg.files.model_copy(update={"test": str(unlabelled)})}))
    with pytest.raises(DataError, match=r"task qa has no test split \(set task\.files\.test to a labelled file\)"):
        sources.load_test_split(cfg)


def test_subsample_is_seeded():
    rows = datasets.Dataset.from_dict({"i": list(range(100))})
    first, again, other = (subsample(rows, 10, seed)["i"][:] for seed in (0, 0, 1))
    assert first == again and first != other
    assert len(first) == 10 and first == sorted(first)
    assert subsample(rows, None, 0) is rows and subsample(rows, 500, 0) is rows


def test_train_texts_covers_both_sides_of_a_pair(tmp_path):
    write_glue_task(tmp_path, "rte")
    texts = train_texts(load_raw(glue_cfg("rte", tmp_path)))
    assert len(texts) == 4 and "Pope Benedict XVI is the new leader." in texts
