"""A runtime variant's version: the exports the registry serves are the only candidates, and
its tags are its own figures over its configuration's."""

from __future__ import annotations

import pandas as pd

from pipeline.config import SelectionConfig
from pipeline.select.variant_registry import onnx_pip_requirements, variant_tags
from pipeline.select.variants import served_front
from tests.conftest import variant, variants_of

BASE = {"trial_id": "kd-s1", "metric": "0.85", "metric_std": "0.01", "metric_n": "3", "latency_device": "Test CPU",
        "latency_threads": "4", "code_sha256": "c0de", "teacher": "bert-base"}


def row(runtime: str) -> pd.Series:
    return pd.Series({"runtime": runtime, "front_shape": "32x64", "device": "cpu", "metric": 0.84, "latency_ms": 1.5,
                      "latency_p90_ms": 1.8, "latency_low_ms": 1.4, "latency_high_ms": 1.6, "speedup": 6.0,
                      "speedup_same_runtime": 2.0, "threads": 2, "size_bytes": 1234, "parity_max_abs_diff": 1e-3,
                      "path": "/w/kd-s1/model.int8.onnx"})


def test_a_variants_tags_are_its_own_figures_over_its_configurations():
    tags = variant_tags(BASE, row("onnxruntime-int8"), fp32_metric=0.85)
    assert (tags["metric"], tags["metric_fp32"], tags["latency_ms"], tags["speedup"]) == ("0.84", "0.85", "1.5", "6.0")
    assert (tags["runtime"], tags["shape"], tags["latency_batch_size"], tags["latency_seq_length"]) == (
        "onnxruntime-int8", "32x64", "32", "64")
    assert (tags["latency_threads"], tags["size_bytes"], tags["teacher"]) == ("2", "1234", "bert-base")
    # the configuration's seed spread and eager device are not this export's; ONNX ships no custom code
    assert not {"metric_std", "metric_n", "latency_device", "code_sha256"} & set(tags)
    assert variant_tags(BASE, row("torch-fp16"), None)["code_sha256"] == "c0de"  # a cast student loads the folder's code
    assert "metric_fp32" not in variant_tags(BASE, row("torch-fp16"), None)


def test_only_the_served_exports_are_candidates():
    table = variants_of([variant("teacher", "torch", 0.9, 10.0, "/t"), variant("kd-s1", "torch", 0.85, 4.0, "/a"),
                         variant("kd-s0", "torch", 0.86, 3.0, "/b")])  # kd-s0: a seed the registry does not serve
    marked = served_front(table, pd.DataFrame({"best_trial_id": ["kd-s1"]}), SelectionConfig())
    assert list(marked["trial_id"]) == ["kd-s1"] and marked["pareto"].tolist() == [True]


def test_an_onnx_consumer_installs_no_torch():
    needs = onnx_pip_requirements()
    assert needs[0].startswith("mlflow==") and needs[1].startswith("onnxruntime")
    assert not [n for n in needs if n.startswith(("torch", "transformers"))]
