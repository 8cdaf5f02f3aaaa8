"""`drydock eval MODEL SPEC`: score a student the way a consumer would run it.

MODEL is an exported student folder or a registry reference (`models:/NAME@champion`,
`models:/NAME/3`). Both go through the consumer's loader — a transformers text-classification
pipeline over `AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=...)`,
or `mlflow.pyfunc.load_model(ref)` — and are scored from the label names (or regression scores)
they return, never from drydock's own logits. So a number from `drydock eval` is what the
registry's user will see, including any loss from truncation or label mapping.

No unchecked code runs: a folder loads with `trust_remote_code=True` only when its custom code
(CoFi's `_pruned_bert.py`) is the code its `drydock.json` records (`pipeline.prepare.remote_code`),
and a registry version is loaded with its `code_sha256` tag (kept in the tracking database, not
beside the code) for the pyfunc to hold the logged folder's code to.

The split is read like the sweep read it (`pipeline.prepare.sources.load_raw`, then the same seeded
`max_eval_samples` subsample), so `--split dev` reproduces the sweep's dev metric for the
folder a trial exported. GLUE's test splits carry no labels (the benchmark's server holds them):
asking for one is an error, not a score of zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.config import GLUE_TASKS, SweepSpec
from pipeline.errors import DrydockError
from pipeline.prepare.metrics import compute_metrics

REGISTRY_PREFIXES = ("models:/", "runs:/")
Predict = Callable[[list[Any]], pd.DataFrame]


@dataclass
class EvalResult:
    model: str
    split: str
    num_examples: int
    metrics: dict[str, float]
    primary_metric: str


# ----------------------------------------------------------------------------------------------
# the consumer's loaders
# ----------------------------------------------------------------------------------------------


def is_registry_ref(ref: str) -> bool:
    return ref.startswith(REGISTRY_PREFIXES)


def load_predictor(ref: str, max_length: int | None, tracking_uri: str | None = None) -> Predict:
    """Text in, a DataFrame of label/score out, for a folder or a registry reference."""
    if is_registry_ref(ref):
        import mlflow
        from mlflow.exceptions import MlflowException

        from pipeline.select.registry import tracking
        from pipeline.tracking import redacted

        uri = tracking_uri or mlflow.get_tracking_uri()
        with tracking(uri):
            try:
                model = mlflow.pyfunc.load_model(ref, model_config=registered_code(ref, uri))
            except MlflowException as e:
                raise DrydockError(f"{ref}: cannot be loaded from the registry at {redacted(uri)} ({e.message.splitlines()[0]})") from None
        return lambda inputs: pd.DataFrame(model.predict(inputs))
    folder = Path(ref)
    if not (folder / "config.json").is_file():
        raise DrydockError(f"{folder}: not an exported student folder (no config.json), nor a models:/ reference")
    from pipeline.select.registry import text_classifier

    pipe = text_classifier(folder)

    def predict(inputs: list[Any]) -> pd.DataFrame:
        return pd.DataFrame(pipe(inputs, truncation=True, max_length=max_length, batch_size=32))

    return predict


def registered_code(ref: str, uri: str) -> dict[str, str] | None:
    """`{"code_sha256": tag}` for a registry version that ships custom code (the pyfunc checks the
    code it carries against it); None for a run's model, a stock student or an unknown version."""
    from mlflow.exceptions import MlflowException

    from pipeline.select.registry import client_for

    if not ref.startswith("models:/"):
        return None
    name, _, version = ref.removeprefix("models:/").partition("/")
    name, _, alias = name.partition("@")
    if not alias and not version.isdigit():
        return None  # `latest` or a stage, not resolved here: the pyfunc still checks the digests it carries
    client = client_for(uri)
    try:
        found = client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, version)
    except MlflowException:
        return None  # latest/stage references, or none such: load_model says what is wrong
    tag = found.tags.get("code_sha256")
    return {"code_sha256": tag} if tag else None


# ----------------------------------------------------------------------------------------------
# the labelled split
# ----------------------------------------------------------------------------------------------


def labelled_split(spec: SweepSpec, split: str):
    """The raw split (text_a[, text_b], label), subsampled as the sweep's evaluation was."""
    from pipeline.prepare.sources import load_raw, subsample
    from pipeline.prepare.tasks import task_spec

    task = task_spec(spec.task)
    if split == "test":
        return _test_split(spec)
    if split not in task.dev_splits:
        raise DrydockError(f"--split {split}: task {task.name} has the evaluation split(s) {', '.join(task.dev_splits)} and test")
    raw = load_raw(spec.task)
    return subsample(raw[split], spec.task.max_eval_samples, spec.task.sample_seed)


def with_label_names(spec: SweepSpec) -> SweepSpec:
    """A custom hub task may leave its label names to the dataset's ClassLabel column: the sweep
    pins them into the spec it hands on (`pipeline.prepare.hub_datasets.pinned_task`), and so does
    `drydock eval` for a spec as the user wrote it, so predicted names map to the same indices."""
    from pipeline.prepare.hub_datasets import pinned_task, reads_hub_label_names

    if reads_hub_label_names(spec.task):
        return spec.model_copy(update={"task": pinned_task(spec.task)})
    return spec


def _test_split(spec: SweepSpec):
    """A files source's `task.files.test`, or the hub split `task.splits.test` names."""
    from pipeline.prepare.sources import load_test_split

    cfg = spec.task
    source = cfg.resolved_source()
    if source == "hub" and cfg.splits is not None and cfg.splits.test is not None:
        return load_test_split(cfg)
    if source in ("hub", "glue_dir") and cfg.name in GLUE_TASKS:
        raise DrydockError(
            f"--split test: GLUE's {cfg.name} test split has no labels (the GLUE server scores it), so it cannot be "
            f"scored here; use --split dev"
        )
    if source != "files" or cfg.files is None or not cfg.files.test:
        raise DrydockError(f"--split test: task {cfg.name} has no test split (set task.files.test to a labelled file, "
                           "or task.splits.test to a hub dataset's split)")
    return load_test_split(cfg)


def model_inputs(rows) -> list[Any]:
    """Texts, or {text, text_pair} dicts for pair tasks: what a consumer passes to predict."""
    if "text_b" in rows.column_names:
        return [{"text": a, "text_pair": b} for a, b in zip(rows["text_a"], rows["text_b"])]
    return list(rows["text_a"])


def label_indices(predicted: pd.Series, label_names: tuple[str, ...]) -> np.ndarray:
    """Label names back to the task's indices; `LABEL_3` or `3` when a model has no names."""
    index = {name: i for i, name in enumerate(label_names)}
    out = []
    for label in predicted.astype(str):
        if label in index:
            out.append(index[label])
            continue
        digits = label.removeprefix("LABEL_")
        if digits.isdigit() and int(digits) < len(label_names):
            out.append(int(digits))
            continue
        raise DrydockError(f"the model predicts label {label!r}, which is not one of the task's labels ({', '.join(label_names)})")
    return np.asarray(out, dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# scoring
# ----------------------------------------------------------------------------------------------


def evaluate(ref: str, spec: SweepSpec, split: str = "dev", tracking_uri: str | None = None, rows=None) -> EvalResult:
    """`rows`: the split's rows when the caller has read them already (the select stage scores
    several versions on one dev set)."""
    from pipeline.prepare.tasks import task_spec

    spec = with_label_names(spec)
    task = task_spec(spec.task)
    if rows is None:
        rows = labelled_split(spec, split)  # a missing or unlabelled split fails before any model loads
    predict = load_predictor(ref, spec.task.max_seq_length, tracking_uri)
    predictions = predict(model_inputs(rows))
    if len(predictions) != len(rows):
        raise DrydockError(f"{ref}: returned {len(predictions)} predictions for {len(rows)} inputs")
    labels = np.asarray(rows["label"])
    if task.regression:
        outputs = predictions["score"].to_numpy(dtype=np.float64)[:, None]
    else:
        indices = label_indices(predictions["label"], task.label_names)
        outputs = np.eye(task.num_labels)[indices]  # one-hot: compute_metrics takes the argmax
    metrics = compute_metrics(task.metrics, outputs, labels, task.regression)
    return EvalResult(model=ref, split=split, num_examples=len(rows), metrics=metrics, primary_metric=task.primary_metric)


def format_result(result: EvalResult) -> str:
    shown = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items() if not math.isnan(v))
    return f"{result.model} on {result.split} ({result.num_examples} examples): {shown}"

