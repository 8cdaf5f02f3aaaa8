"""Saving a student and proving the saved folder is the model we trained.

A student counts only after its folder reloads in a fresh Python process — one in which drydock
cannot be imported, as on a consumer's machine — through plain transformers
(`AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=...)`) and
gives the same logits as the trained model's `eval_model()` on a batch of real dev inputs.

`trust_remote_code` is True only for a folder whose configs name custom code (CoFi's
`_pruned_bert.py`) that is exactly the code recorded at export: `save_student` writes the
digests of the folder's `.py` files into `drydock.json`, and `pipeline.prepare.remote_code`
checks them, here in drydock, before the fresh process imports anything.

Every export also carries its model card, `README.md` (`pipeline.prepare.model_card`): a folder
copied out of drydock still says what it is, how it was measured and what it was not tested on.
"""

from __future__ import annotations

import copy
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

from methods import get_declaration
from methods.base import Method, TaskInfo, logits_of
from pipeline.errors import DrydockError
from pipeline.prepare.model_card import write_card
from pipeline.prepare.remote_code import code_record, remote_code, weights_record
from pipeline.prepare.stage import Prepared
from pipeline.training.batches import collate
from pipeline.workdir import STUDENT_DIR
from pipeline.workdir import VERIFY_FILE as VERIFY_FILE

# method, parameters, metrics, teacher, data fingerprint and, for a hub teacher or hub data, the
# commit each was loaded at (`teacher_revision`, `data_revision`): what a registry version is tagged with;
# also the task's name and the method's summary, which the model card (README.md) is rendered from
METADATA_FILE = "drydock.json"
VERIFY_ATOL = 1e-4

# Runs in the fresh process. drydock's packages are poisoned in sys.modules first, so a
# folder that secretly needs drydock fails here instead of on a consumer's machine. It serves
# one request per input line (folder, batch file, output file), so a sweep pays the import of
# torch and transformers once, not once per student.
_VERIFY_SCRIPT = r"""
import json, sys, traceback
for name in ("pipeline", "methods", "drydock"):
    sys.modules[name] = None
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSequenceClassification
from transformers.utils import logging
logging.set_verbosity_error()
print("ready", flush=True)
for line in sys.stdin:
    folder, batch_file, out_file, trust = json.loads(line)
    try:
        model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=trust).eval()
        with torch.no_grad():
            logits = model(**load_file(batch_file)).logits.float()
        save_file({"logits": logits.contiguous()}, out_file)
        print(json.dumps({"ok": True}), flush=True)
    except Exception:
        print(json.dumps({"ok": False, "error": traceback.format_exc()[-3000:]}), flush=True)
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


def method_facts(name: str | None, params: dict[str, Any] | None) -> dict[str, Any]:
    """What the model card says of the method (its one-line summary, whether it learned from the
    teacher), kept in drydock.json because the card is rendered again later from the folder
    alone, by the select stage, which may not reach the method registry through training."""
    try:
        cls = get_declaration(str(name))
    except (KeyError, TypeError, ImportError):  # a method whose plugin is gone: the card names it only
        return {}
    try:
        uses_teacher = cls.needs_teacher(cls.Params.model_validate(params or {}))
    except ValueError:
        uses_teacher = cls.uses_teacher
    return {"method_summary": cls.summary, "uses_teacher": bool(uses_teacher)}


def save_student(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    folder: Path,
    task: TaskInfo,
    metadata: dict[str, Any],
) -> Path:
    """The folder a consumer gets: weights, tokenizer, drydock.json and the model card
    (README.md, without latency until the select stage has timed it)."""
    folder.mkdir(parents=True, exist_ok=True)
    # transformers declares PreTrainedModel.to with functools.wraps(nn.Module.to): mypy sees the unbound signature
    model = model.to("cpu").eval()  # type: ignore[arg-type]
    label_config(model, task)
    model.save_pretrained(folder)  # safetensors: transformers 5 writes nothing else
    tokenizer.save_pretrained(folder)
    facts = {"task": task.name, **method_facts(metadata.get("method"), metadata.get("params"))}
    # the digests of its custom code, if it ships any, and of its weights (`pipeline.prepare.remote_code`)
    metadata = {**facts, **metadata, **code_record(folder), **weights_record(folder)}
    (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True, default=str))
    write_card(folder)  # after drydock.json, which it is rendered from; README.md is no code, so no digest covers it
    return folder


def save_reference(path: Path, batch: dict[str, torch.Tensor], expected: torch.Tensor) -> None:
    """For verification later, in another process (the sweep's driver verifies every trial)."""
    save_file({**{f"batch.{k}": v.contiguous() for k, v in batch.items()}, "expected": expected.contiguous()}, str(path))


def load_reference(path: Path) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    tensors = load_file(str(path))
    return {k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith("batch.")}, tensors["expected"]


def reference_batch(dev_dataset, n: int = 16, pad_id: int = 0) -> dict[str, torch.Tensor]:
    columns = dev_dataset[: min(n, len(dev_dataset))]
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    batch = collate(rows, pad_id)
    batch.pop("labels", None)
    return batch


@torch.no_grad()
def reference_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The logits the export must reproduce, from a float32 CPU copy when the model trained
    elsewhere: the verifier reruns the saved (float32) student on the CPU, and a GPU's kernels or
    bf16 weights differ from that by more than `VERIFY_ATOL` while the export is faithful."""
    first = next(model.parameters())
    if first.device.type != "cpu" or any(p.is_floating_point() and p.dtype != torch.float32 for p in model.parameters()):
        # moved, then copied on the CPU, then put back: a copy made on the GPU would need the
        # model's memory twice there at the end of training
        device = first.device
        model.to("cpu")
        try:
            copied = copy.deepcopy(model)
        finally:
            model.to(device)
        model = copied.to(dtype=torch.float32)
    was_training = model.training
    model.eval()
    out = logits_of(model(**batch)).float()
    model.train(was_training)
    return out


class Verifier:
    """A fresh Python process, without drydock, that reloads saved students and returns logits."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false",
                    "TQDM_DISABLE": "1"})  # transformers' weight-loading bar, once per model
        self._tmp = tempfile.TemporaryDirectory()
        # Its stderr goes to a file, read back only to explain a failure: a pipe nobody reads
        # fills (64 KiB), and the process then blocks on its next write, the sweep waiting on its
        # answer for ever; transformers' loading bar filled it after some hundred students
        # (benchmarks/sweep_scale.py, N = 1,000, 2026-12-05).
        self._stderr = open(Path(self._tmp.name) / "stderr.txt", "w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _VERIFY_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True, env=env, cwd=self._tmp.name,
        )
        # both are pipes (subprocess.PIPE); Popen types each as optional
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin, self._stdout = self._proc.stdin, self._proc.stdout
        self._count = 0
        # Not waited for here: a sweep starts its verifier beside the first trials, and Tune's
        # event loop (which runs our callback) waits only if an export is ready before the verifier.
        self._ready = False

    def _wait_ready(self) -> None:
        if not self._ready:
            if self._readline() != "ready":
                raise ExportMismatch(f"the verification process did not start:\n{self._said()}")
            self._ready = True

    def _readline(self) -> str:
        line = self._stdout.readline()
        if not line:
            raise ExportMismatch(f"the verification process died:\n{self._said()}")
        return line.strip()

    def _said(self) -> str:
        """The end of what the process wrote to stderr."""
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-2000:]

    def logits(self, folder: Path, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        # absolute: the fresh process runs in its own temporary directory, where a relative
        # `out/student` (`drydock train --output out`) names nothing and reads as a hub repository id
        folder = Path(folder).absolute()
        try:
            trust = remote_code(folder)  # checked here, before the fresh process imports any of it
        except DrydockError as e:
            raise ExportMismatch(str(e)) from None
        self._wait_ready()
        self._count += 1
        batch_file = Path(self._tmp.name) / f"batch{self._count}.safetensors"
        out_file = Path(self._tmp.name) / f"logits{self._count}.safetensors"
        save_file({k: v.contiguous() for k, v in batch.items()}, str(batch_file))
        self._stdin.write(json.dumps([str(folder), str(batch_file), str(out_file), trust]) + "\n")
        self._stdin.flush()
        answer = json.loads(self._readline())
        if not answer["ok"]:
            raise ExportMismatch(f"{folder} does not load without drydock:\n{answer['error']}")
        return load_file(str(out_file))["logits"]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._stderr.close()
        self._tmp.cleanup()

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reload_logits_in_fresh_process(folder: Path, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with Verifier() as verifier:
        return verifier.logits(folder, batch)


def verify_export(folder: Path, expected: torch.Tensor, batch: dict[str, torch.Tensor], verifier: Verifier | None = None) -> float:
    """Max absolute logit difference between the saved folder and the trained model."""
    got = verifier.logits(folder, batch) if verifier else reload_logits_in_fresh_process(folder, batch)
    if got.shape != expected.shape:
        raise ExportMismatch(f"{folder}: reloaded logits have shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    diff = float((got - expected).abs().max())
    scale = max(1.0, float(expected.abs().max()))
    if diff > VERIFY_ATOL * scale:
        raise ExportMismatch(f"{folder}: reloaded logits differ from the trained model's by {diff:.3g}")
    return diff


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(all parameters, parameters outside the embeddings) — the figures papers report."""
    total = sum(p.numel() for p in model.parameters())
    embeddings = 0
    for name, module in model.named_modules():
        if name.endswith("embeddings"):
            embeddings = sum(p.numel() for p in module.parameters())
            break
    return total, total - embeddings


def export_student(method: Method, prepared: Prepared, output_dir: Path, metadata: dict[str, Any]) -> dict[str, int]:
    """The trained method's export saved as `output_dir/student`, with the reference batch and
    the trained model's logits beside it (`VERIFY_FILE`) for `verify_saved`; returns its sizes."""
    batch = reference_batch(prepared.data.dev["dev"], pad_id=prepared.pad_id)
    expected = reference_logits(method.eval_model(), batch)  # before export: an export may share or move modules
    student = method.export()
    total, encoder = count_parameters(student)
    sizes = {"num_params": total, "num_params_encoder": encoder}
    save_student(student, prepared.tokenizer, output_dir / STUDENT_DIR, prepared.task, {**metadata, **sizes})
    save_reference(output_dir / VERIFY_FILE, batch, expected)
    return sizes


def verify_saved(output_dir: Path, verifier: Verifier | None = None) -> float:
    """`verify_export` of `output_dir/student` against the reference saved beside it."""
    batch, expected = load_reference(output_dir / VERIFY_FILE)
    return verify_export(output_dir / STUDENT_DIR, expected, batch, verifier)
