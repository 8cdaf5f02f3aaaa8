"""Bad rows are refused before any tokenizing, naming the file, the line (or row index) and the
column: a label outside the task's, a score that is not a number, a text that is empty or not text."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.sources import load_raw
from tests.unit.prepare.task_files import (
    GLUE_CASES,
    GOOD,
    ROWS,
    files_cfg,
    files_task,
    glue_cfg,
    jsonl,
    refused,
    tsv,
    write_glue_task,
)


def test_label_outside_the_label_set_names_value_row_and_labels(tmp_path):
    rows = [*ROWS[:2], {"question": "q", "answer": "a", "verdict": "maybe"}]
    with pytest.raises(DataError) as err:
        load_raw(files_cfg(tmp_path, "tsv", rows))
    # line 1 is the header, so the third data row is line 4
    assert "train.tsv: line 4: label 'maybe' is not one of the task's labels (no, yes, or an index 0-1)" in str(err.value)


def test_integer_label_out_of_range(tmp_path):
    folder = write_glue_task(tmp_path, "sst2", {"train.tsv": tsv("sentence\tlabel", "ok\t1", "bad\t2"), "dev.tsv": tsv("sentence\tlabel", "x\t0")})
    with pytest.raises(DataError, match=r"SST-2/train\.tsv: line 3: label '2' is not one of the task's labels \(negative, positive"):
        load_raw(glue_cfg("sst2", folder))


def test_empty_split(tmp_path):
    write_glue_task(tmp_path, "rte", {"train.tsv": GLUE_CASES["rte"][0]["train.tsv"], "dev.tsv": "index\tsentence1\tsentence2\tlabel\n"})
    with pytest.raises(DataError, match=r"RTE/dev\.tsv: the dev split is empty"):
        load_raw(glue_cfg("rte", tmp_path))


def test_non_numeric_regression_label(tmp_path):
    files = dict(GLUE_CASES["stsb"][0])
    files["dev.tsv"] = files["dev.tsv"].replace("\t0.000", "\tn/a")
    write_glue_task(tmp_path, "stsb", files)
    with pytest.raises(DataError, match=r"STS-B/dev\.tsv: line 2: label 'n/a' is not a number"):
        load_raw(glue_cfg("stsb", tmp_path))


@pytest.mark.parametrize("score", ["1e308", "-3e16"])
def test_a_regression_score_the_float32_loss_cannot_hold_is_refused_at_its_line(tmp_path, score):
    """1e308 becomes inf in the float32 dataset and the loss overflowed at step 1, blamed on the
    learning rate; a square beyond float32 (|score| above 1e15) overflows the squared error."""
    files = dict(GLUE_CASES["stsb"][0])
    files["dev.tsv"] = files["dev.tsv"].replace("\t0.000", f"\t{score}")
    write_glue_task(tmp_path, "stsb", files)
    with pytest.raises(DataError, match=rf"STS-B/dev\.tsv: line 2: label '{score}' is beyond ±1e\+15"):
        load_raw(glue_cfg("stsb", tmp_path))


def test_an_empty_text_in_a_csv_names_file_line_and_column(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("question,answer,verdict\nis it good?,yes,yes\n,no,no\n")
    assert refused(files_task(tmp_path, train)) == (
        f"{train}: line 3: text column 'question' is empty (give the row its text, or remove it)")


def test_a_whitespace_only_text_in_jsonl_and_parquet(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", [GOOD[0], {"question": "q?", "answer": " \t ", "verdict": "no"}])
    assert refused(files_task(tmp_path, train)).startswith(f"{train}: line 2: text column 'answer' is only whitespace")
    table = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD[0], {"question": "   ", "answer": "a", "verdict": "yes"}]), table)
    assert refused(files_task(tmp_path, table)).startswith(f"{table}: row index 1: text column 'question' is only whitespace")


def test_a_glue_release_keeps_its_empty_texts_as_published(tmp_path):
    # GLUE's QQP has two empty questions: the benchmark is read as released (glue_dir and hub)
    folder = tmp_path / "RTE"
    folder.mkdir()
    (folder / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tA man.\t\tentailment\n")
    (folder / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tA man.\tA person.\tentailment\n")
    raw = load_raw(TaskConfig(name="rte", source="glue_dir", glue_dir=str(tmp_path)))
    assert raw["train"]["text_b"][:] == [""]


@pytest.mark.parametrize(("value", "shown"), [(42, "int 42"), (1.5, "float 1.5"), ({"a": 1}, "dict {'a': 1}"),
                                              (["x"], "list ['x']"), (True, "bool True")])
def test_a_value_that_is_not_text_is_refused_not_stringified(tmp_path, value, shown):
    train = jsonl(tmp_path / "train.jsonl", [GOOD[0], GOOD[1], {"question": value, "answer": "a", "verdict": "yes"}])
    assert refused(files_task(tmp_path, train)) == f"{train}: line 3: text column 'question' holds {shown}, not text"


def test_a_numeric_parquet_column_is_not_text(tmp_path):
    table = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": 7, "answer": "a", "verdict": "yes"}]), table)
    assert refused(files_task(tmp_path, table)) == f"{table}: row index 0: text column 'question' holds int 7, not text"
