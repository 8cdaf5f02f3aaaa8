"""Saving a student and proving the saved folder is the model we trained.

A student counts only after its folder reloads in a fresh Python process — one in which drydock
cannot be imported, as on a consumer's machine — through plain transformers
(`AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True)`) and
gives the same logits as the trained model's `eval_model()` on a batch of real dev inputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from methods.base import TaskInfo, logits_of

METADATA_FILE = "drydock.json"
VERIFY_ATOL = 1e-4

# Runs in the fresh process. drydock's packages are poisoned in sys.modules first, so a
# folder that secretly needs drydock fails here instead of on a consumer's machine.
_VERIFY_SCRIPT = r"""
import sys
for name in ("pipeline", "methods", "drydock"):
    sys.modules[name] = None
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSequenceClassification
from transformers.utils import logging
logging.set_verbosity_error()
folder, batch_file, out_file = sys.argv[1:4]
model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
batch = load_file(batch_file)
with torch.no_grad():
    logits = model(**batch).logits.float()
save_file({"logits": logits.contiguous()}, out_file)
"""


class ExportMismatch(RuntimeError):
    """The saved student does not reproduce the trained model: it must not count."""


def label_config(model: PreTrainedModel, task: TaskInfo) -> None:
    """Consumers get label names, not indices (`predict` → "positive")."""
    if task.regression:
        model.config.problem_type = "regression"
        return
    names = list(task.label_names) or [str(i) for i in range(task.num_labels)]
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {n: i for i, n in enumerate(names)}


def save_student(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    folder: Path,
    task: TaskInfo,
    metadata: dict[str, Any],
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model = model.to("cpu").eval()
    label_config(model, task)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True, default=str))
    return folder


def reference_batch(dev_dataset, n: int = 16, pad_id: int = 0) -> dict[str, torch.Tensor]:
    from pipeline.loop import collate

    columns = dev_dataset[: min(n, len(dev_dataset))]
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    batch = collate(rows, pad_id)
    batch.pop("labels", None)
    return batch


@torch.no_grad()
def reference_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = logits_of(model(**{k: v.to(device) for k, v in batch.items()})).float().cpu()
    model.train(was_training)
    return out


def reload_logits_in_fresh_process(folder: Path, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with tempfile.TemporaryDirectory() as tmp:
        batch_file, out_file = Path(tmp) / "batch.safetensors", Path(tmp) / "logits.safetensors"
        save_file({k: v.contiguous() for k, v in batch.items()}, str(batch_file))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"})
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _VERIFY_SCRIPT, str(folder), str(batch_file), str(out_file)],
            capture_output=True, text=True, env=env, cwd=tmp, timeout=600,
        )
        if proc.returncode != 0:
            raise ExportMismatch(f"{folder} does not load without drydock:\n{proc.stderr.strip()[-2000:]}")
        return load_file(str(out_file))["logits"]


def verify_export(folder: Path, expected: torch.Tensor, batch: dict[str, torch.Tensor]) -> float:
    """Max absolute logit difference between the saved folder and the trained model."""
    got = reload_logits_in_fresh_process(folder, batch)
    if got.shape != expected.shape:
        raise ExportMismatch(f"{folder}: reloaded logits have shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    diff = float((got - expected).abs().max())
    scale = max(1.0, float(expected.abs().max()))
    if diff > VERIFY_ATOL * scale:
        raise ExportMismatch(f"{folder}: reloaded logits differ from the trained model's by {diff:.3g}")
    return diff
