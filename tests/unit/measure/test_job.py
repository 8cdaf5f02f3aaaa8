"""The variant job's small rules: how a runner is named, which shape the memory is measured at,
the random inputs it is timed on, one line per failure, and when variants are built at all."""

from __future__ import annotations

import numpy as np

from pipeline.config import SelectionConfig
from pipeline.measure.job import failure, latency_inputs, memory_shape, runner_name, variants_wanted


def test_a_runner_is_named_by_trial_and_runtime():
    assert runner_name("kd-a-s0", "onnxruntime-int8") == "kd-a-s0/onnxruntime-int8"


def test_memory_is_measured_at_the_largest_shape_the_model_takes():
    shapes = [(1, 128), (32, 64), (8, 256)]
    assert memory_shape({"max_position_embeddings": 512}, shapes) == (8, 256)  # 2048 tokens
    assert memory_shape({"max_position_embeddings": 128}, shapes) == (32, 64)  # 256 is too long
    assert memory_shape({}, [(4, 64), (2, 128)]) == (2, 128)  # a tie on tokens: the longer
    assert memory_shape({"max_position_embeddings": 32}, shapes) is None


def test_latency_inputs_are_seeded_unpadded_token_ids_within_the_vocabulary():
    first = latency_inputs({"vocab_size": 50}, 3, 7)
    again = latency_inputs({"vocab_size": 50}, 3, 7)
    assert {k: v.shape for k, v in first.items()} == {k: (3, 7) for k in ("input_ids", "attention_mask", "token_type_ids")}
    assert all(v.dtype == np.int64 for v in first.values())
    assert np.array_equal(first["input_ids"], again["input_ids"]) and first["input_ids"].max() < 50
    assert first["attention_mask"].min() == 1 and first["token_type_ids"].max() == 0


def test_a_failure_is_its_type_and_last_line():
    assert failure(ValueError("first line\nthe reason")) == "ValueError: the reason"
    assert failure(RuntimeError("")) == "RuntimeError: "
    assert len(failure(OSError("x" * 900))) == 500


def test_variants_are_built_only_beyond_eager_fp32_at_one_shape():
    one_shape = {"shapes": ["32x64"]}
    assert not variants_wanted(SelectionConfig(runtimes=["torch"], latency=one_shape))
    assert variants_wanted(SelectionConfig(runtimes=["torch", "onnxruntime-int8"], latency=one_shape))
    assert variants_wanted(SelectionConfig(runtimes=["torch"], latency={"shapes": ["1x128", "32x64"]}))
