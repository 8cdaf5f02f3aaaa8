"""GLUE metrics, in numpy/scipy so evaluation needs no `evaluate`/sklearn download.

Metric names (the keys `compute_metrics` returns, and the names a spec's `task.metrics` uses):

- `accuracy` — fraction of exact label matches.
- `f1` — binary F1 of the positive class (label 1: MRPC `equivalent`, QQP `duplicate`).
- `mcc` — Matthews correlation coefficient (CoLA).
- `pearson`, `spearman` — correlations of predicted and gold scores (STS-B).
- `combined` — the mean of a task's metrics when it has two, as the GLUE leaderboard reports
  MRPC (f1, accuracy), QQP (f1, accuracy) and STS-B (pearson, spearman).

Degenerate inputs (a constant prediction, a single class) give 0.0 for `mcc` and the
correlations instead of NaN: a student that collapses to one class has learned nothing, and a NaN
would poison the Pareto selection and Tune's early stopping, which both compare metric values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

MetricFn = Callable[[np.ndarray, np.ndarray], float]


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(predictions == labels)) if len(labels) else 0.0


def f1(predictions: np.ndarray, labels: np.ndarray) -> float:
    """F1 of class 1; 0.0 when there is neither a predicted nor a gold positive."""
    true_pos = int(np.sum((predictions == 1) & (labels == 1)))
    false_pos = int(np.sum((predictions == 1) & (labels != 1)))
    false_neg = int(np.sum((predictions != 1) & (labels == 1)))
    denominator = 2 * true_pos + false_pos + false_neg
    return 2 * true_pos / denominator if denominator else 0.0


def matthews_corrcoef(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Multi-class MCC (Gorodkin's R_K, as sklearn computes it); binary MCC is the special case."""
    classes = np.union1d(predictions, labels)
    pred_idx = np.searchsorted(classes, predictions)
    gold_idx = np.searchsorted(classes, labels)
    confusion = np.zeros((len(classes), len(classes)), dtype=np.float64)
    np.add.at(confusion, (gold_idx, pred_idx), 1)
    gold_totals, pred_totals = confusion.sum(axis=1), confusion.sum(axis=0)
    n, correct = confusion.sum(), np.trace(confusion)
    numerator = correct * n - gold_totals @ pred_totals
    denominator = np.sqrt((n * n - pred_totals @ pred_totals) * (n * n - gold_totals @ gold_totals))
    return float(numerator / denominator) if denominator > 0 else 0.0


def pearson(predictions: np.ndarray, labels: np.ndarray) -> float:
    return _correlation(stats.pearsonr, predictions, labels)


def spearman(predictions: np.ndarray, labels: np.ndarray) -> float:
    return _correlation(stats.spearmanr, predictions, labels)


def _correlation(fn: Callable, predictions: np.ndarray, labels: np.ndarray) -> float:
    """scipy warns and returns NaN on constant input; a constant prediction correlates with nothing."""
    predictions, labels = np.asarray(predictions, np.float64), np.asarray(labels, np.float64)
    if len(labels) < 2 or np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return 0.0
    value = float(fn(predictions, labels)[0])
    return value if np.isfinite(value) else 0.0


METRICS: dict[str, MetricFn] = {
    "accuracy": accuracy,
    "f1": f1,
    "mcc": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
}


def compute_metrics(
    metric_names: Sequence[str], logits: np.ndarray, labels: np.ndarray, regression: bool
) -> dict[str, float]:
    """Each named metric of the model's outputs, plus `combined` when there are two.

    Classification takes the argmax of `logits` (shape [n, num_labels]); regression reads the
    single output column (shape [n, 1] or [n]; anything else fails the reshape loudly).
    """
    unknown = [name for name in metric_names if name not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    logits, labels = np.asarray(logits), np.asarray(labels)
    predictions = logits.reshape(len(labels)) if regression else np.argmax(logits, axis=-1)
    results = {name: METRICS[name](predictions, labels) for name in metric_names}
    if len(results) == 2:
        results["combined"] = float(np.mean(list(results.values())))
    return results
