"""`drydock.train` end to end through the API alone (issue 36: the CLI's tests ran it, the API's
did not): the smoke spec's teacher, then one kd student trained in this process, exported,
reloaded alone and labelling text through `drydock.load_student`, with the caller's logging left
as it was."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import drydock

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"


def test_train_exports_a_student_that_reloads_alone_and_labels_text(tmp_path):
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    result = drydock.train(SMOKE, "kd", tmp_path / "out", overrides={"train.epochs": 1}, workdir=tmp_path / "runs", show=False)

    assert result.method == "kd" and result.student == tmp_path / "out" / "student"
    metrics = result.metrics
    assert metrics["steps"] == 16  # 512 synthetic training rows, batch 32, one epoch
    assert metrics["metric_name"] == "accuracy" and 0.0 <= metrics["metric"] <= 1.0
    assert metrics["export_max_abs_diff"] <= 1e-4  # the reloaded export gives the trained wrapper's logits
    assert metrics["num_params_encoder"] < metrics["num_params"]
    config = json.loads((result.student / "config.json").read_text())
    assert config["num_hidden_layers"] == 2  # the spec's student: half the 4-layer teacher, physically
    assert json.loads((result.student / "drydock.json").read_text())["method"] == "kd"
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["steps"] == 16

    predictions = drydock.load_student(result.student).predict(["a b c", "d e f"])
    assert len(predictions) == 2 and set(predictions["label"]) <= {"class_0", "class_1"}
    assert all(0.5 <= score <= 1.0 for score in predictions["score"])  # the top class's probability of two
    assert (root.level, root.handlers) == (level, handlers)
