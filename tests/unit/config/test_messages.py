"""A spec's mistakes read as one line each, naming the field, the value and, for a typo, the fix."""

from __future__ import annotations

from pipeline.config import SweepSpec, TrainConfig, format_error, param_error
from tests.unit.config.minimal import MINIMAL, problems


def test_unknown_key_names_the_field():
    raw = {**MINIMAL, "train": {"epochs": 1, "epocs": 2}}
    assert problems(raw) == ["train.epocs: unknown key (not part of the spec); did you mean train.epochs?"]


def test_wrong_type_names_the_field_and_value():
    raw = {**MINIMAL, "train": {"batch_size": "big"}}
    (line,) = problems(raw)
    assert line.startswith("train.batch_size: ") and "'big'" in line


def test_negative_sequence_length():
    raw = {**MINIMAL, "task": {**MINIMAL["task"], "max_seq_length": -5}}
    (line,) = problems(raw)
    assert line.startswith("task.max_seq_length: ") and "greater than 0" in line and "-5" in line


def test_an_unknown_key_is_matched_against_the_schema_it_is_read_with():
    err = {"type": "extra_forbidden", "loc": ("train", "epocs"), "msg": "Extra inputs are not permitted", "input": 2}
    assert format_error(err, SweepSpec) == "train.epocs: unknown key (not part of the spec); did you mean train.epochs?"
    assert format_error({**err, "loc": ("epocs",)}, TrainConfig) == "epocs: unknown key (not part of the spec); did you mean epochs?"
    assert format_error(err) == "train.epocs: unknown key (not part of the spec; check the spelling)"


def test_a_value_error_reads_as_its_message_the_hint_and_the_value():
    err = {"type": "value_error", "loc": ("task",), "msg": "Value error, custom task 'sst' needs task.text_columns", "input": "sst"}
    assert format_error(err, SweepSpec, "; did you mean sst2?") == (
        "task: custom task 'sst' needs task.text_columns; did you mean sst2? (got 'sst')")
    assert param_error({**err, "loc": ("alpha",)}) == "custom task 'sst' needs task.text_columns (got 'sst')"
