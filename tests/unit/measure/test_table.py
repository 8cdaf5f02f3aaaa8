"""The measurement table (`pipeline.measure.table`, variants.parquet): its columns at every shape,
the figures each measurement gives a row, its refusals, and the file's round trip."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pipeline.config import Shape
from pipeline.measure.job import TEACHER
from pipeline.measure.runtimes import EAGER
from pipeline.measure.table import (
    FIGURES,
    VARIANTS_FILE,
    measurement_rows,
    read_variants,
    shape_column,
    table_shapes,
    variants_path,
    write_variants,
)
from tests.unit.select.test_variants import TEACHER_FACTS, TEACHER_RUNNERS, fact, measured, timing


def two_shapes() -> pd.DataFrame:
    """Two shapes (1x128, the front's 32x64); s2 timed as s1 at 32x64 and untimed at 1x128."""
    small = measured({"teacher/torch": (2.0, 1.9, 2.1), "s1/torch": (1.0, 0.9, 1.1)})
    big = measured({"teacher/torch": (10.0, 9.5, 10.5), "s1/torch": (4.0, 3.8, 4.2), "s2/torch": (4.0, 3.8, 4.2)})
    big = big.model_copy(update={"timings": {**big.timings, "s2/torch": timing(4.0, 3.8, 4.2, measured_as="s1/torch")}})
    facts = [fact("teacher/torch", 0.9), fact("s1/torch", 0.86), fact("s2/torch", 0.85)]
    return measurement_rows(facts, {Shape(batch_size=1, seq_length=128): small, "32x64": big}, front_shape=Shape(batch_size=32, seq_length=64),
                        device="cpu", threads=2)


def test_every_shape_has_its_columns_and_the_front_shape_is_unsuffixed():
    frame = two_shapes().set_index(["trial_id", "runtime"])
    assert table_shapes(frame) == ["1x128", "32x64"]
    for figure in FIGURES:
        assert shape_column(figure, "1x128") in frame and shape_column(figure, (32, 64)) in frame
    s1 = frame.loc[("s1", "torch")]
    assert (s1["latency_ms@1x128"], s1["latency_p90_ms@1x128"], s1["speedup@1x128"]) == (1.0, 1.25, 2.0)
    assert (s1["latency_ms@32x64"], s1["latency_p90_ms@32x64"], s1["speedup@32x64"]) == (4.0, 5.0, 2.5)
    for figure in FIGURES:
        assert s1[figure] == s1[f"{figure}@32x64"]
    assert s1["front_shape"] == "32x64" and s1["device"] == "cpu" and s1["threads"] == 2 and pd.isna(s1["measured_as"])
    s2 = frame.loc[("s2", "torch")]
    assert s2["measured_as"] == "s1/torch" and math.isnan(s2["latency_ms@1x128"]) and s2["latency_error"] == "1x128: not timed"
    teacher = frame.loc[(TEACHER, EAGER)]
    assert teacher["speedup"] == 1.0 and teacher["speedup_same_runtime"] == 1.0


def test_measurement_rows_refuses_an_unmeasured_front_shape_and_a_repeated_variant():
    result = measured(TEACHER_RUNNERS)
    with pytest.raises(ValueError, match="front shape 1x128 was not measured"):
        measurement_rows(TEACHER_FACTS, {"32x64": result}, front_shape="1x128", device="cpu", threads=1)
    with pytest.raises(ValueError, match="teacher/torch: given twice"):
        measurement_rows(TEACHER_FACTS * 2, {"32x64": result}, front_shape="32x64", device="cpu", threads=1)


def test_write_and_read_round_trip(tmp_path):
    frame = two_shapes()
    path = variants_path(tmp_path / "sweep")
    assert path.name == VARIANTS_FILE
    write_variants(path, frame)
    back = read_variants(path)
    pd.testing.assert_frame_equal(back, frame)
    assert [p.name for p in path.parent.iterdir()] == [VARIANTS_FILE]  # no temporary file left
    assert back["pareto"].isna().all()  # no front drawn yet: `pipeline.select.variants` marks it
    assert str(back["pareto"].dtype) == "boolean" and str(back["size_bytes"].dtype) == "Int64"
    empty = read_variants(tmp_path / "none" / VARIANTS_FILE)
    assert len(empty) == 0 and {"trial_id", "runtime", "latency_ms", "speedup", "pareto"} <= set(empty.columns)
