"""Verifying a trial's export: the reference saved beside the student, checked in a fresh process."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.training.export import VERIFY_FILE, ExportMismatch, reference_logits, save_reference
from pipeline.training.trial import METRICS_FILE, verify_trial
from tests.conftest import make_tiny_bert


def saved_trial(tmp_path, shift: float):
    model = make_tiny_bert(seed=3).eval()
    model.save_pretrained(tmp_path / "student")
    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(5, 90, (2, 7), generator=g), "attention_mask": torch.ones(2, 7, dtype=torch.long),
             "token_type_ids": torch.zeros(2, 7, dtype=torch.long)}
    save_reference(tmp_path / VERIFY_FILE, batch, reference_logits(model, batch) + shift)
    (tmp_path / METRICS_FILE).write_text(json.dumps({"metric": 0.9, "timings": {"seconds_train": 1.0}}))


def test_a_verified_student_gets_its_difference_in_metrics_json(tmp_path):
    saved_trial(tmp_path, shift=0.0)
    diff = verify_trial(tmp_path)
    metrics = json.loads((tmp_path / METRICS_FILE).read_text())
    assert diff <= 1e-4 and metrics["export_max_abs_diff"] == diff and metrics["metric"] == 0.9
    assert set(metrics["timings"]) == {"seconds_train", "seconds_verify"}


def test_a_student_that_does_not_reproduce_its_logits_does_not_count(tmp_path):
    saved_trial(tmp_path, shift=0.01)  # 100× the tolerance
    with pytest.raises(ExportMismatch, match="differ from the trained model's by 0.01"):
        verify_trial(tmp_path)
    assert not (tmp_path / METRICS_FILE).exists()
