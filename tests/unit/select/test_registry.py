"""The registry's pure parts: tag values as text, what a version's tags say (the served seed's
own timing, with the shape and device it was measured at), and MLflow's URI put back after use."""

from __future__ import annotations

import math
import os

import mlflow

from pipeline.measure.latency import Measurement
from pipeline.select.registry import tag_text, tracking, version_tags

CONFIG = {
    "method": "kd", "config": "kd alpha=0.5", "params": {"alpha": 0.5}, "best_trial_id": "kd-s1", "best_seed": 1,
    "metric_name": "accuracy", "metric_mean": 0.85, "metric_std": math.nan, "n": 1, "best_metric": 0.85,
    "best_latency_ms": 2.5, "best_latency_p90_ms": 3.0, "best_speedup": 4.0, "num_params": 1_000_000.4,
    "num_params_encoder": math.nan, "best_student_path": "/w/demo/kd-s1/student",
}


def test_tag_text_writes_floats_exactly_structures_as_json_and_nothing_for_missing():
    assert (tag_text(0.1), tag_text(3), tag_text("x")) == ("0.1", "3", "x")
    assert tag_text({"b": 1, "a": [1, 2]}) == '{"a": [1, 2], "b": 1}'
    assert tag_text(None) == "" and tag_text(math.nan) == ""


def test_a_versions_tags_are_its_served_seeds_own_figures():
    m = Measurement(path="x", p50_ms=2.5, p90_ms=3.0, mean_ms=2.6, throughput=3200.0, runs=10, warmup=3, batch_size=8,
                    seq_length=32, device="cpu", device_name="Test CPU", threads=4, torch_version="2.0", num_params=1000,
                    hostname="box")
    tags = version_tags(CONFIG, "demo", m, {"teacher": "bert-base", "data_fingerprint": "abc"})
    assert (tags["trial_id"], tags["metric"], tags["latency_ms"], tags["speedup"]) == ("kd-s1", "0.85", "2.5", "4.0")
    assert tags["params"] == '{"alpha": 0.5}' and tags["num_params"] == "1000000"
    assert (tags["runtime"], tags["shape"], tags["device"], tags["latency_threads"]) == ("torch", "8x32", "cpu", "4")
    assert "metric_std" not in tags and "num_params_encoder" not in tags and "code_sha256" not in tags  # missing: no tag
    assert "shape" not in version_tags(CONFIG, "demo", None, {})  # never timed: no shape to name


def test_tracking_puts_the_uri_and_the_environment_back(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    before = mlflow.get_tracking_uri()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking(uri):
        assert mlflow.get_tracking_uri() == uri and os.environ["MLFLOW_TRACKING_URI"] == uri
    assert mlflow.get_tracking_uri() == before
    assert "MLFLOW_TRACKING_URI" not in os.environ and "MLFLOW_REGISTRY_URI" not in os.environ
