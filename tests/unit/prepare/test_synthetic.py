"""The synthetic source: deterministic, shaped by its settings, one class's cues per sentence."""

from __future__ import annotations

from pipeline.config import TaskConfig
from pipeline.prepare import synthetic
from pipeline.prepare.sources import load_raw
from pipeline.prepare.tasks import task_spec


def test_synthetic_task_is_deterministic_and_shaped_by_its_settings():
    cfg = TaskConfig(name="smoke", source="synthetic", synthetic={"num_train": 64, "num_dev": 16, "num_labels": 3, "min_words": 4, "max_words": 9})
    raw = load_raw(cfg)
    assert (len(raw["train"]), len(raw["dev"])) == (64, 16)
    assert set(raw["train"]["label"][:]) == {0, 1, 2}
    assert all(4 <= len(t.split()) <= 9 for t in raw["train"]["text_a"][:])
    assert raw["train"][:] == load_raw(cfg)["train"][:]
    other_seed = load_raw(cfg.model_copy(update={"sample_seed": 1}))
    assert raw["train"]["text_a"][:] != other_seed["train"]["text_a"][:]
    assert task_spec(cfg).label_names == ("class_0", "class_1", "class_2")


def test_synthetic_sentences_carry_only_their_own_class_cues():
    raw = load_raw(TaskConfig(name="smoke", source="synthetic", synthetic={"num_train": 200, "num_labels": 4}))
    for text, label in zip(raw["train"]["text_a"][:], raw["train"]["label"][:]):
        words = set(text.split())
        cues = [i for i, group in enumerate(synthetic._CUE_WORDS) if words & set(group)]
        assert cues == [label]
