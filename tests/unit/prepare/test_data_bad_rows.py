"""Bad rows in the user's data files are refused before any tokenizing, naming the file, the line
(or row index) and the column: never stringified, truncated or trained on silently."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.sources import load_raw
from pipeline.prepare.tokenized import prepare_unlabeled

GOOD = [{"question": "is it good?", "answer": "yes", "verdict": "yes"}, {"question": "is it bad?", "answer": "no", "verdict": "no"}]


def files_task(tmp_path: Path, train: Path, dev: Path | None = None, **kw) -> TaskConfig:
    if dev is None:
        dev = tmp_path / "dev.jsonl"
        dev.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    return TaskConfig(name="qa", source="files", files={"train": str(train), "dev": str(dev)},
                      text_columns=["question", "answer"], label_column="verdict", label_names=["no", "yes"], **kw)


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refused(cfg: TaskConfig) -> str:
    with pytest.raises(DataError) as info:
        load_raw(cfg)
    (line,) = info.value.problems
    return line


# --- empty texts ---------------------------------------------------------------------------


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


# --- values that are not text -------------------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [(42, "int 42"), (1.5, "float 1.5"), ({"a": 1}, "dict {'a': 1}"),
                                              (["x"], "list ['x']"), (True, "bool True")])
def test_a_value_that_is_not_text_is_refused_not_stringified(tmp_path, value, shown):
    train = jsonl(tmp_path / "train.jsonl", [GOOD[0], GOOD[1], {"question": value, "answer": "a", "verdict": "yes"}])
    assert refused(files_task(tmp_path, train)) == f"{train}: line 3: text column 'question' holds {shown}, not text"


def test_a_numeric_parquet_column_is_not_text(tmp_path):
    table = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": 7, "answer": "a", "verdict": "yes"}]), table)
    assert refused(files_task(tmp_path, table)) == f"{table}: row index 0: text column 'question' holds int 7, not text"


# --- rows with too many fields -------------------------------------------------------------


def test_an_unquoted_comma_in_a_csv_text_is_refused_not_truncated(tmp_path):
    # the last column's text ran on past a comma: " not at all" was dropped silently
    train = tmp_path / "train.csv"
    train.write_text("verdict,question,answer\nyes,is it good?,yes\nno,is it bad?,no, not at all\n")
    assert refused(files_task(tmp_path, train)) == (
        f"{train}: line 3: has 4 fields, expected 3 (verdict, question, answer): a text holding a comma must be in double quotes")


def test_a_tsv_row_with_an_extra_field_names_its_line(tmp_path):
    # CoLA's files have no header and the sentence last: a tab inside it cut the sentence short
    folder = tmp_path / "CoLA"
    folder.mkdir()
    (folder / "train.tsv").write_text("gj04\t1\t\tOur friends won't buy this analysis.\ngj04\t0\t*\tThey drank\tthe pub.\n")
    (folder / "dev.tsv").write_text("bc01\t1\t\tThe sailors rode the breeze.\n")
    line = refused(TaskConfig(name="cola", source="glue_dir", glue_dir=str(tmp_path)))
    assert line == (f"{folder / 'train.tsv'}: line 2: has 5 fields, expected 4 (source, label, original_label, sentence): "
                    "a text may not hold a tab")


def test_trailing_empty_fields_lose_nothing_and_are_read(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("question,answer,verdict\nis it good?,yes,yes,\nis it bad?,no,no,,\n")
    assert load_raw(files_task(tmp_path, train))["train"]["text_a"][:] == ["is it good?", "is it bad?"]


# --- where a byte that is not UTF-8 is -----------------------------------------------------


def many_lines(n: int) -> list[bytes]:
    # long enough that the text layer decodes past the bad byte's line long before the reader gets there
    return [f"question number {i} with some padding text to fill the block,answer {i},yes\n".encode() for i in range(n)]


def test_a_byte_that_is_not_utf8_is_reported_at_its_own_line_in_a_csv(tmp_path):
    lines = [b"question,answer,verdict\n", *many_lines(200)]
    lines[150] = b"caf\xe9 au lait?,yes,yes\n"  # line 151 of the file
    train = tmp_path / "train.csv"
    train.write_bytes(b"".join(lines))
    offset = len(b"".join(lines[:150])) + 3
    assert refused(files_task(tmp_path, train)) == f"{train}: line 151: byte {offset} (0xe9) is not UTF-8; save the file as UTF-8"


def test_a_byte_that_is_not_utf8_in_jsonl_is_a_data_error_with_its_line(tmp_path):
    lines = [json.dumps({"question": f"q {i} " + "pad " * 20, "answer": "a", "verdict": "yes"}).encode() + b"\n" for i in range(300)]
    lines[241] = b'{"question": "na\xefve?", "answer": "a", "verdict": "no"}\n'
    train = tmp_path / "train.jsonl"
    train.write_bytes(b"".join(lines))
    assert refused(files_task(tmp_path, train)).startswith(f"{train}: line 242: byte ")


def test_a_csv_parse_error_names_the_line_it_happened_on(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("question,answer,verdict\nis it good?,yes,yes\n" + "x" * 50 + ",no,no\n")
    limit = csv.field_size_limit(20)
    try:
        line = refused(files_task(tmp_path, train))
    finally:
        csv.field_size_limit(limit)
    assert line.startswith(f"{train}: line 3: cannot be parsed (field larger than field limit")


def test_an_extra_unlabeled_file_that_is_not_utf8_names_its_line(tmp_path, tiny_tokenizer):
    extra = tmp_path / "extra.txt"
    extra.write_bytes(b"first line\nsecond line\nthird \xff line\n")
    train = jsonl(tmp_path / "train.jsonl", GOOD)
    with pytest.raises(DataError) as info:
        prepare_unlabeled(files_task(tmp_path, train), tiny_tokenizer, tmp_path / "cache", None, [str(extra)])
    assert info.value.problems == [f"{extra}: line 3: byte 29 (0xff) is not UTF-8; save the file as UTF-8"]
