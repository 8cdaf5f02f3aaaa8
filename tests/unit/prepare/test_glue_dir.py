"""The glue_dir source: every GLUE layout read exactly as the release writes it."""

from __future__ import annotations

import pytest

from pipeline.errors import DataError
from pipeline.prepare.sources import load_raw
from pipeline.prepare.tasks import task_spec
from tests.unit.prepare.task_files import (
    GLUE_CASES,
    glue_cfg,
    tsv,
    write_glue_task,
)


@pytest.mark.parametrize("task", sorted(GLUE_CASES))
def test_every_glue_layout_parses_exactly(task, tmp_path):
    write_glue_task(tmp_path, task)
    raw = load_raw(glue_cfg(task, tmp_path))
    expected = GLUE_CASES[task][1]
    assert list(raw) == list(expected)
    for split, (texts_a, texts_b, labels) in expected.items():
        rows = raw[split]
        assert rows["text_a"][:] == texts_a
        if texts_b is None:
            assert rows.column_names == ["text_a", "label"]
        else:
            assert rows["text_b"][:] == texts_b
        assert rows["label"][:] == pytest.approx(labels)
        assert rows.features["label"].dtype == ("float32" if task == "stsb" else "int64")


def test_glue_dir_may_point_at_the_task_folder(tmp_path):
    folder = write_glue_task(tmp_path, "rte")
    assert load_raw(glue_cfg("rte", folder))["train"]["label"][:] == [1, 0]


def test_missing_glue_file_names_the_path_and_the_layout(tmp_path):
    write_glue_task(tmp_path, "rte", {"train.tsv": GLUE_CASES["rte"][0]["train.tsv"]})
    with pytest.raises(DataError, match=r"RTE/dev\.tsv: file not found.*RTE"):
        load_raw(glue_cfg("rte", tmp_path))


def test_short_row_names_its_line(tmp_path):
    write_glue_task(tmp_path, "rte", {"train.tsv": tsv("index\tsentence1\tsentence2\tlabel", "0\tonly one"), "dev.tsv": GLUE_CASES["rte"][0]["dev.tsv"]})
    with pytest.raises(DataError, match=r"train\.tsv: line 2: has 2 fields, expected 4"):
        load_raw(glue_cfg("rte", tmp_path))


@pytest.mark.data
def test_shared_sst2_and_rte_row_counts_match_the_release(glue_dir):
    sst2 = load_raw(glue_cfg("sst2", glue_dir))
    rte = load_raw(glue_cfg("rte", glue_dir))
    assert (len(sst2["train"]), len(sst2["dev"])) == (67_349, 872)
    assert (len(rte["train"]), len(rte["dev"])) == (2_490, 277)
    assert set(rte["train"]["label"][:]) == {0, 1}
    assert task_spec(glue_cfg("rte", glue_dir)).label_names == ("entailment", "not_entailment")
    first = rte["train"][0]
    assert (first["text_b"], first["label"]) == ("Weapons of Mass Destruction Found in Iraq.", 1)  # not_entailment
