"""The ONNX pyfunc's pure parts: every input form a consumer sends as (text, pair) rows, and
logits as the label and probability a transformers pipeline would return."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pipeline.measure.onnx_pyfunc import labels_and_scores, rows_of


def test_every_input_form_reads_as_text_and_pair_rows():
    assert rows_of("one") == [("one", None)]
    assert rows_of(["a", "b"]) == [("a", None), ("b", None)]
    assert rows_of({"text": "a", "text_pair": "b"}) == [("a", "b")]
    assert rows_of([("a", "b"), {"text": "c"}]) == [("a", "b"), ("c", None)]
    frame = pd.DataFrame({"text": ["a", "c"], "text_pair": ["b", math.nan]})
    assert rows_of(frame) == [("a", "b"), ("c", None)]  # a missing pair: a single text
    assert rows_of(pd.DataFrame({"sentence": ["x", "y"]})) == [("x", None), ("y", None)]  # the first column
    assert rows_of(pd.Series(["s"])) == [("s", None)]


def test_logits_become_the_top_label_and_its_probability():
    labels, scores = labels_and_scores(np.array([[0.0, math.log(3.0)]]), {0: "neg", 1: "pos"}, None)
    assert labels == ["pos"] and scores == pytest.approx([0.75])  # softmax: 3 / (1 + 3)
    labels, scores = labels_and_scores(np.array([[0.0]]), {0: "yes"}, None)  # one logit: its sigmoid
    assert labels == ["yes"] and scores == pytest.approx([0.5])
    assert labels_and_scores(np.array([[2.5]]), {}, "regression") == (["LABEL_0"], [2.5])  # the raw value
    assert labels_and_scores(np.array([[0.0, 1.0, 0.0]]), {}, None)[0] == ["LABEL_1"]  # no names: LABEL_<i>
