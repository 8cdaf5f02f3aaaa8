"""The files source: csv/tsv/jsonl/parquet read with their columns mapped, and malformed files
refused naming the file and the line (or row index): never truncated or misread silently."""

from __future__ import annotations

import csv
import json

import pytest

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.sources import load_raw
from tests.unit.prepare.task_files import (
    files_cfg,
    files_task,
    many_lines,
    refused,
)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_files_source_maps_columns_and_string_labels(fmt, tmp_path):
    raw = load_raw(files_cfg(tmp_path, fmt))
    train = raw["train"]
    assert train["text_a"][:] == ["is it good, really?", "is it bad?", "maybe?"]
    assert train["text_b"][:] == ['yes, "very"', "no", "who knows"]
    assert train["label"][:] == [1, 0, 1]  # by name, by name, and an index in range
    assert len(raw["dev"]) == 1


def test_files_format_can_be_given_explicitly(tmp_path):
    assert len(load_raw(files_cfg(tmp_path, "tsv", suffix="txt"))["train"]) == 3


def test_missing_files_source_file(tmp_path):
    files = {"train": str(tmp_path / "nope.csv"), "dev": "x.csv"}
    cfg = TaskConfig(name="qa", source="files", files=files, text_columns=["q"], label_names=["no", "yes"])
    with pytest.raises(DataError, match=r"nope\.csv: file not found \(task\.files\.train\)"):
        load_raw(cfg)


def test_missing_column_lists_the_columns_found(tmp_path):
    cfg = files_cfg(tmp_path, "csv", label_column="gold")
    with pytest.raises(DataError) as err:
        load_raw(cfg)
    assert "train.csv: missing column 'gold' (columns found: 'question', 'answer', 'verdict')" in str(err.value)


def test_bad_parquet_label_names_its_row_index(tmp_path):
    rows = [{"question": "q", "answer": "a", "verdict": "yes"}, {"question": "q", "answer": "a", "verdict": None}]
    with pytest.raises(DataError, match=r"train\.parquet: row index 1: label None is not one of the task's labels"):
        load_raw(files_cfg(tmp_path, "parquet", rows))


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


def test_a_column_named_twice_in_the_header_is_refused_not_read_from_its_first(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("verdict,question,answer,verdict\nyes,is it good?,yes,no\nno,is it bad?,no,yes\n")
    assert refused(files_task(tmp_path, train)) == (
        f"{train}: line 1: the header names verdict twice (columns 1 and 4); which one is meant cannot be told")


def test_a_quote_that_runs_on_over_a_line_is_refused_not_merged_into_one_row(tmp_path):
    # the quote opened on line 3 closes on line 4: one row of three fields, line 3's verdict and
    # line 4's answer, and line 4's own verdict gone
    train = tmp_path / "train.csv"
    train.write_text('verdict,question,answer\nyes,is it good?,yes\nno,"is it bad?,no\nyes,is it fine",yes\n')
    assert refused(files_task(tmp_path, train)) == (
        f"{train}: line 3: a quoted text runs on to line 4 (a quote left open?); texts may not span lines: "
        "close the quote, or replace the line breaks inside texts with spaces")
