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


def test_the_reference_logits_come_from_a_float32_cpu_copy_and_leave_the_trained_model_as_it_was():
    """The verifier reruns the saved student on the CPU in float32; a reference computed where the
    model trained (a GPU's kernels, bf16 weights) differs from that by more than the tolerance
    although the export is faithful. Shown here with bf16 weights, the one half a CPU can show."""
    model = make_tiny_bert(seed=3)
    with torch.no_grad():
        model.classifier.weight.mul_(300)  # logits of a few units, as a trained head gives, not ~0.01
    model = model.to(torch.bfloat16).train()
    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(5, 90, (4, 9), generator=g), "attention_mask": torch.ones(4, 9, dtype=torch.long),
             "token_type_ids": torch.zeros(4, 9, dtype=torch.long)}
    float_copy = make_tiny_bert(seed=3).eval()
    float_copy.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    with torch.no_grad():
        in_float32 = float_copy(**batch).logits
        in_bf16 = model.eval()(**batch).logits.float()
    model.train()
    assert (in_bf16 - in_float32).abs().max() > 1e-3 * max(1.0, float(in_float32.abs().max()))  # what it was: 10× the tolerance
    got = reference_logits(model, batch)
    assert got.dtype == torch.float32 and torch.equal(got, in_float32)
    assert model.training and next(model.parameters()).dtype == torch.bfloat16


# A stand-in for the verification process's script: it writes more to stderr than a pipe holds
# (64 KiB) before every answer, as transformers' loading bars did over a sweep's hundreds of
# students, then answers zeros; asked for "die", it says why on stderr and exits.
NOISY_VERIFIER = r"""
import json, sys
import torch
from safetensors.torch import save_file
print("ready", flush=True)
for line in sys.stdin:
    folder, batch_file, out_file, trust = json.loads(line)
    if folder.endswith("die"):
        sys.stderr.write("the reason it died\n")
        sys.exit(3)
    sys.stderr.write("x" * 200_000)
    sys.stderr.flush()
    save_file({"logits": torch.zeros(1, 2)}, out_file)
    print(json.dumps({"ok": True}), flush=True)
"""


@pytest.mark.timeout(120)  # before the fix the verification process blocked on its stderr, the caller for ever
def test_a_verification_process_that_writes_much_to_stderr_never_blocks_and_a_dying_one_says_why(tmp_path, monkeypatch):
    from pipeline.training import export

    monkeypatch.setattr(export, "_VERIFY_SCRIPT", NOISY_VERIFIER)
    for name in ("student", "die"):
        make_tiny_bert().save_pretrained(tmp_path / name)
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long)}
    with export.Verifier() as verifier:
        for _ in range(3):  # 600 KB of stderr, ten times what a pipe holds
            assert verifier.logits(tmp_path / "student", batch).tolist() == [[0.0, 0.0]]
        with pytest.raises(ExportMismatch, match="the verification process died:\n.*the reason it died"):
            verifier.logits(tmp_path / "die", batch)
