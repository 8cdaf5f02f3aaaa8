"""GLUE metrics against values computed by hand, and the degenerate cases that must not be NaN."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from pipeline.prepare.metrics import accuracy, compute_metrics, f1, matthews_corrcoef, pearson, spearman

# preds  1 1 0 1 0
# labels 1 0 0 1 1   ->  TP = 2 (0, 3), FP = 1 (1), FN = 1 (4), TN = 1 (2)
PREDS = np.array([1, 1, 0, 1, 0])
LABELS = np.array([1, 0, 0, 1, 1])


def test_accuracy():
    assert accuracy(PREDS, LABELS) == pytest.approx(3 / 5)  # positions 0, 2, 3 match


def test_f1_of_the_positive_class():
    # 2·TP / (2·TP + FP + FN) = 4 / 6
    assert f1(PREDS, LABELS) == pytest.approx(4 / 6)


def test_f1_without_any_positive_is_zero():
    assert f1(np.array([0, 0]), np.array([0, 0])) == 0.0


def test_binary_mcc():
    # (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 − 1) / sqrt(3·3·2·2) = 1/6
    assert matthews_corrcoef(PREDS, LABELS) == pytest.approx(1 / 6)


def test_multiclass_mcc():
    # gold 0 0 1 1 2 2, pred 0 0 1 2 2 2: correct c = 5, n = 6, gold totals t = (2, 2, 2),
    # predicted totals p = (2, 1, 3).  (c·n − t·p) / sqrt((n² − p·p)(n² − t·t))
    # = (30 − 12) / sqrt((36 − 14)(36 − 12)) = 18 / sqrt(528)
    labels = np.array([0, 0, 1, 1, 2, 2])
    preds = np.array([0, 0, 1, 2, 2, 2])
    assert matthews_corrcoef(preds, labels) == pytest.approx(18 / math.sqrt(528))


def test_mcc_of_perfect_and_inverted_predictions():
    labels = np.array([0, 1, 0, 1])
    assert matthews_corrcoef(labels, labels) == pytest.approx(1.0)
    assert matthews_corrcoef(1 - labels, labels) == pytest.approx(-1.0)


def test_pearson():
    # x = 1 2 3, y = 1 2 4: deviations (−1 0 1), (−4/3 −1/3 5/3); cov sum = 3,
    # Σdx² = 2, Σdy² = 42/9  ->  r = 3 / sqrt(2 · 42/9)
    assert pearson(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0])) == pytest.approx(3 / math.sqrt(2 * 42 / 9))


def test_spearman():
    # ranks 1 2 3 4 vs 1 3 2 4: Σd² = 2  ->  ρ = 1 − 6·2 / (4·(16 − 1)) = 0.8
    assert spearman(np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 30.0, 20.0, 40.0])) == pytest.approx(0.8)


@pytest.mark.parametrize("metric", [matthews_corrcoef, pearson, spearman])
def test_constant_predictions_give_zero_not_nan(metric):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's ConstantInputWarning would mean we let NaN through
        assert metric(np.array([1, 1, 1, 1]), np.array([0, 1, 0, 1])) == 0.0
        assert metric(np.array([1, 1, 1, 1]), np.array([1, 1, 1, 1])) == 0.0


def test_compute_metrics_classification_takes_the_argmax():
    logits = np.array([[0.1, 0.9], [0.2, 0.3], [2.0, -1.0], [-1.0, 1.0], [0.5, 0.4]])  # -> 1 1 0 1 0 = PREDS
    result = compute_metrics(["f1", "accuracy"], logits, LABELS, regression=False)
    assert result == pytest.approx({"f1": 4 / 6, "accuracy": 3 / 5, "combined": (4 / 6 + 3 / 5) / 2})


def test_compute_metrics_single_metric_has_no_combined():
    logits = np.eye(2)[PREDS]
    assert compute_metrics(["mcc"], logits, LABELS, regression=False) == pytest.approx({"mcc": 1 / 6})


def test_compute_metrics_regression_squeezes_the_output_column():
    logits = np.array([[1.0], [2.0], [3.0], [4.0]])
    labels = np.array([10.0, 30.0, 20.0, 40.0], dtype=np.float32)
    result = compute_metrics(["pearson", "spearman"], logits, labels, regression=True)
    assert result["spearman"] == pytest.approx(0.8)
    assert result["combined"] == pytest.approx((result["pearson"] + 0.8) / 2)


def test_compute_metrics_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown metric.*bleu"):
        compute_metrics(["bleu"], np.zeros((1, 2)), np.zeros(1), regression=False)
