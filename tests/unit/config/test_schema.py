"""The spec's sections: defaults, the latency shapes and their front, placement and counts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipeline.config import LatencyConfig, spec_from_dict, spec_to_dict
from tests.unit.config.minimal import MINIMAL, problems


def test_minimal_spec_and_defaults():
    spec = spec_from_dict(MINIMAL)
    assert spec.seeds == [0] and spec.train.batch_size == 32
    assert spec.resources.strategy == "ddp" and spec.search.scheduler == "fifo"
    assert spec.registered_model_name == "t-student" and spec.experiment_name == "t"


def latency_of(latency: dict) -> LatencyConfig:
    return spec_from_dict({**MINIMAL, "selection": {"latency": latency}}).selection.latency


def test_a_spec_that_lists_shapes_and_names_no_front_gets_the_front_it_expects():
    # the only shape listed is the front: nothing else is timed
    latency = latency_of({"shapes": ["1x128"]})
    assert [s.label for s in latency.shapes] == ["1x128"] and latency.front_shape.label == "1x128"
    assert (latency.batch_size, latency.seq_length) == (1, 128)
    # several: 32x64, the default front, when listed
    latency = latency_of({"shapes": ["1x128", "8x128", "32x64"]})
    assert [s.label for s in latency.shapes] == ["1x128", "8x128", "32x64"] and latency.front_shape.label == "32x64"
    # several without it: which one the budget means is the user's to say
    assert problems({**MINIMAL, "selection": {"latency": {"shapes": ["1x128", "8x128"]}}}) == [
        "selection.latency: shapes lists 1x128, 8x128 and no front_shape: set selection.latency.front_shape to the one "
        "of them the variants' front and the latency budget use"]
    assert latency_of({"shapes": ["1x128", "8x128"], "front_shape": "8x128"}).seq_length == 128
    # a shape listed twice is still said so, not taken for two
    assert problems({**MINIMAL, "selection": {"latency": {"shapes": ["1x128", "1x128"]}}}) == [
        "selection.latency.shapes: 1x128 is listed twice"]


def test_batch_size_and_seq_length_keep_their_front_beside_listed_shapes():
    # a spec from before `shapes` (or one that names its front by the fields) keeps its front exactly
    latency = latency_of({"batch_size": 8, "seq_length": 32, "shapes": ["1x128"]})
    assert latency.front_shape.label == "8x32" and [s.label for s in latency.shapes] == ["1x128", "8x32"]
    latency = latency_of({"seq_length": 128, "shapes": ["1x128"]})  # batch_size at its default
    assert latency.front_shape.label == "32x128" and [s.label for s in latency.shapes] == ["1x128", "32x128"]
    assert latency_of({}) == LatencyConfig() and LatencyConfig().front_shape.label == "32x64"
    # a run's spec.json names all three: read back the same
    spec = spec_from_dict({**MINIMAL, "selection": {"latency": {"shapes": ["1x128"]}}})
    assert spec_from_dict(spec_to_dict(spec)) == spec


def test_a_copy_cannot_make_the_fronts_names_disagree():
    latency = LatencyConfig()
    moved = latency.model_copy(update={"front_shape": "1x128"})
    assert (moved.front_shape.label, moved.batch_size, moved.seq_length) == ("1x128", 1, 128)
    moved = latency.model_copy(update={"batch_size": 1, "seq_length": 128})
    assert moved.front_shape.label == "1x128" and [s.label for s in moved.shapes] == ["1x128", "32x64"]
    moved = latency.model_copy(update={"seq_length": 32})
    assert moved.front_shape.label == "32x32" and [s.label for s in moved.shapes] == ["1x128", "32x64", "32x32"]
    with pytest.raises(ValidationError, match="is not one of selection.latency.shapes"):
        latency.model_copy(update={"shapes": ["1x128"]})
    plain = latency.model_copy(update={"accelerator_type": "A100"})  # any other field: a plain copy
    assert plain.accelerator_type == "A100" and plain.front_shape == latency.front_shape


def test_teacher_placement_follows_the_trials_onto_gpus():
    where = lambda *sets: spec_from_dict(MINIMAL, list(sets)).resources.teacher_on_workers()
    assert where() is False  # CPU trials: the driver fine-tunes it (no Train start-up to pay)
    assert where("resources.use_gpu=true") is True  # the driver's node may have no GPU
    assert where("resources.use_gpu=true", "resources.teacher_placement=driver") is False
    assert where("resources.teacher_placement=workers") is True


def test_keep_checkpoints_is_a_positive_count_named_in_the_error():
    assert spec_from_dict(MINIMAL).train.keep_checkpoints == 1  # the latest carries the best's state too
    assert spec_from_dict(MINIMAL, ["train.keep_checkpoints=3"]).train.keep_checkpoints == 3
    assert problems({**MINIMAL, "train": {"keep_checkpoints": 0}}) == ["train.keep_checkpoints: Input should be greater than 0 (got 0)"]
    (line,) = problems(MINIMAL, ["train.keep_checkpoints=two"])
    assert line.startswith("train.keep_checkpoints: ") and "'two'" in line
