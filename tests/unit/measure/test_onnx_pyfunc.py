"""The ONNX pyfunc's pure parts: every input form a consumer sends as (text, pair) rows, and
logits as the label and probability a transformers pipeline would return."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd
import pytest

from pipeline.measure.onnx_pyfunc import check_graph, labels_and_scores, rows_of


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


def test_a_graph_whose_digest_differs_from_the_recorded_one_is_refused(tmp_path):
    """`check_graph` runs before the session is opened, on the consumer's machine (no drydock
    there: the pyfunc hashes the file itself)."""
    graph = tmp_path / "model.onnx"
    graph.write_bytes(b"not the measured graph")
    digest = hashlib.sha256(b"not the measured graph").hexdigest()
    check_graph(graph, digest)  # as recorded: nothing to say
    check_graph(graph, None)  # a version logged before digests were recorded: not checked
    with pytest.raises(ValueError, match=rf"model.onnx: SHA-256 {digest}, but {'0' * 64} was recorded when this version was logged"):
        check_graph(graph, "0" * 64)
