"""`drydock eval`'s pure parts: what a registry reference is, the label names a model returns
back to the task's indices, and the line it prints."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pipeline.errors import DrydockError
from pipeline.select.evaluate import EvalResult, format_result, is_registry_ref, label_indices

LABELS = ("negative", "positive")


def test_a_registry_reference_is_a_models_or_runs_uri():
    assert is_registry_ref("models:/students@champion") and is_registry_ref("runs:/abc/model")
    assert not is_registry_ref("/work/demo/trials/kd/student") and not is_registry_ref("models/kd")


def test_label_names_and_generic_labels_map_back_to_indices():
    assert label_indices(pd.Series(["positive", "negative", "LABEL_1", "0"]), LABELS).tolist() == [1, 0, 1, 0]
    with pytest.raises(DrydockError, match="'LABEL_2', which is not one of the task's labels"):
        label_indices(pd.Series(["LABEL_2"]), LABELS)
    with pytest.raises(DrydockError, match="'neutral'"):
        label_indices(pd.Series(["neutral"]), LABELS)


def test_the_result_line_leaves_out_undefined_metrics():
    result = EvalResult(model="models:/s/3", split="dev", num_examples=872,
                        metrics={"accuracy": 0.91234, "matthews_correlation": math.nan}, primary_metric="accuracy")
    assert format_result(result) == "models:/s/3 on dev (872 examples): accuracy 0.9123"
