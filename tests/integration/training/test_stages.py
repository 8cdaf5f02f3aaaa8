"""The shared stages run once: tokenized data and the fine-tuned teacher come from the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import load_spec
from pipeline.prepare.stage import prepare
from pipeline.training.teacher import ensure_teacher

ROOT = Path(__file__).resolve().parents[3]


def test_teacher_is_fine_tuned_once_and_reused(tmp_path, monkeypatch):
    spec = load_spec(ROOT / "sweeps" / "smoke.yaml", ["teacher.finetune.epochs=1"])
    messages: list[str] = []
    prepared = prepare(spec, tmp_path)
    first = ensure_teacher(spec, prepared, tmp_path, log=messages.append)
    assert not first.reused and first.metrics["eval/accuracy"] > 0
    assert (first.path / "config.json").is_file() and (first.path / "teacher_metrics.json").is_file()
    # the one evaluation (end of the epoch: 512 examples / 32) reached the log, and is the one kept
    assert messages[1:] == [f"teacher: step 16: accuracy {first.metrics['eval/accuracy']:.4f}"], messages

    # a second run with the same inputs: same tokenizer and data from the cache, no training
    import datasets

    monkeypatch.setattr(datasets.Dataset, "map", lambda *a, **k: pytest.fail("re-tokenized"))
    from pipeline.training import loop

    monkeypatch.setattr(loop, "run", lambda *a, **k: pytest.fail("the teacher was fine-tuned again"))
    again = prepare(spec, tmp_path)
    assert again.data.fingerprint == prepared.data.fingerprint
    second = ensure_teacher(spec, again, tmp_path, log=messages.append)
    assert second.reused and second.path == first.path and second.metrics == first.metrics
    assert "reusing the fine-tuned teacher" in messages[-1]

    # other fine-tuning settings are another teacher
    monkeypatch.undo()
    other = load_spec(ROOT / "sweeps" / "smoke.yaml", ["teacher.finetune.epochs=1", "teacher.finetune.learning_rate=5e-4"])
    third = ensure_teacher(other, prepare(other, tmp_path), tmp_path, log=messages.append)
    assert not third.reused and third.path != first.path


def test_a_teacher_that_diverges_is_a_clear_error_and_caches_nothing(tmp_path):
    from pipeline.training.teacher import TeacherDiverged, teacher_key

    spec = load_spec(ROOT / "sweeps" / "smoke.yaml", ["teacher.finetune.learning_rate=1e30"])
    prepared = prepare(spec, tmp_path)
    with pytest.raises(TeacherDiverged, match=r"^teacher: fine-tuning random diverged \(loss is not finite at step 1 "
                                              r"\(phase finetune\): task=nan, total=nan\); teacher.finetune.learning_rate is 1e\+30"):
        ensure_teacher(spec, prepared, tmp_path, log=lambda _: None)
    assert not (tmp_path / "teachers" / teacher_key(spec, prepared)).exists()
