"""The prepare stage: the tokenizer (the teacher's, or one trained offline on the task's training
text) and the tokenized Arrow dataset, keyed by a content fingerprint and cached in the work
directory, so every trial and every later sweep with the same inputs reuses them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from methods.base import TaskInfo
from pipeline.config import SweepSpec
from pipeline.prepare.cache import atomic_dir, digest
from pipeline.prepare.data import PreparedData, load_raw, prepare_data, train_texts
from pipeline.prepare.models import load_tokenizer
from pipeline.prepare.text_tokenizer import train_wordpiece


@dataclass
class Prepared:
    tokenizer: PreTrainedTokenizerBase
    data: PreparedData
    task: TaskInfo

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id or 0)


def task_info(data: PreparedData) -> TaskInfo:
    t = data.task
    return TaskInfo(name=t.name, num_labels=t.num_labels, regression=t.regression, label_names=tuple(t.label_names or ()))


def resolve_tokenizer(spec: SweepSpec, cache: Path) -> PreTrainedTokenizerBase:
    settings = spec.teacher.tokenizer
    if settings is None:
        return load_tokenizer(spec.teacher.finetuned or spec.teacher.model)
    # Trained offline on the training text: the key covers the text itself and the settings.
    raw = load_raw(spec.task)
    texts = train_texts(raw)
    key = digest({"texts": hashlib.sha256("\n".join(texts).encode()).hexdigest(), "settings": settings.model_dump()})

    def build(tmp: Path) -> None:
        train_wordpiece(texts, vocab_size=settings.vocab_size, lowercase=settings.lowercase).save_pretrained(tmp)

    return AutoTokenizer.from_pretrained(str(atomic_dir(cache / f"tokenizer-{key}", build)))


def prepare(spec: SweepSpec, workdir: Path) -> Prepared:
    cache = workdir / "cache"
    tokenizer = resolve_tokenizer(spec, cache)
    data = prepare_data(spec.task, tokenizer, cache)
    return Prepared(tokenizer=tokenizer, data=data, task=task_info(data))
