"""The results table's rows and the one parameter flattener, in both of its forms."""

from __future__ import annotations

import math

import pytest

from pipeline import results as results_table
from pipeline.results import flatten

PARAMS = {"alpha": 0.5, "layers": [1, 2], "names": ("a", None), "opt": {"x": 1, "y": [True]}, "empty": {},
          "none": None, "flag": True, "schedule": "linear"}


def test_the_tables_form_keeps_scalars_typed_and_writes_containers_as_one_string():
    assert flatten(PARAMS, "params.") == {
        "params.alpha": 0.5, "params.layers": "[1, 2]", "params.names": "('a', None)",
        "params.opt": "{'x': 1, 'y': [True]}", "params.empty": "{}", "params.none": None, "params.flag": True,
        "params.schedule": "linear",
    }


def test_mlflows_form_opens_dicts_into_dotted_keys_and_writes_text():
    assert flatten(PARAMS, nested=True, as_text=True) == {
        "alpha": "0.5", "layers": "[1, 2]", "names": '["a", null]', "opt.x": "1", "opt.y": "[true]",
        "empty": "{}",  # a method given with no parameters is kept
        "none": "None", "flag": "True", "schedule": "linear",
    }
    assert flatten({"methods": {"finetune": {}, "kd": {"alpha": {"grid": [0.5, 0.9]}}}}, "spec.", nested=True, as_text=True) == {
        "spec.methods.finetune": "{}", "spec.methods.kd.alpha.grid": "[0.5, 0.9]",
    }


def test_tracking_flattens_with_the_same_function():
    from pipeline.tracking import flatten_params

    assert flatten_params(PARAMS) == flatten(PARAMS, nested=True, as_text=True)
    assert flatten_params({"b": {"c": 2}}, "a.") == {"a.b.c": "2"}


def test_a_trial_row_carries_its_params_and_metrics_as_flat_columns():
    row = results_table.trial_row("kd-s0", "kd", 0, {"alpha": 0.5, "layers": [0, 2]}, "finished",
                                  {"metric": 0.8, "teacher_metric": 0.9, "metrics": {"accuracy": 0.8, "f1": 0.7}, "steps": 40})
    assert row["params.alpha"] == 0.5 and row["params.layers"] == "[0, 2]"
    assert row["metrics.accuracy"] == 0.8 and row["metrics.f1"] == 0.7
    assert row["retention"] == pytest.approx(0.8 / 0.9) and row["steps"] == 40
    assert row["latency_ms"] is None and row["pareto"] is None  # the select stage fills them
    frame = results_table.to_frame([row])
    assert list(frame.columns) == results_table.ordered_columns(list(row))
    assert frame.loc[0, "params.alpha"] == 0.5 and math.isclose(frame.loc[0, "metrics.f1"], 0.7)


def test_a_damaged_results_table_is_one_line_naming_the_file(tmp_path):
    """`drydock report` on a results.parquet cut short (a full disk, a copy that failed) printed
    pyarrow's traceback; it is a DataError naming the file, which the CLI prints as one line."""
    from pipeline.cli.main import main
    from pipeline.errors import DataError

    sweep = tmp_path / "s"
    sweep.mkdir()
    table = sweep / results_table.RESULTS_FILE
    table.write_bytes(b"PAR1 cut short")
    with pytest.raises(DataError, match=rf"^{table}: cannot be read as a results table"):
        results_table.read_results(table)
    assert main(["report", str(sweep)]) == 2
