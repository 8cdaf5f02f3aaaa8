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
from pipeline.prepare.cache import CacheDamaged, atomic_dir, check_cache, digest, discard, unreadable_as_damaged
from pipeline.prepare.fingerprint import tokenizer_digest
from pipeline.prepare.models import load_tokenizer
from pipeline.prepare.sources import load_raw, train_texts
from pipeline.prepare.text_tokenizer import train_wordpiece
from pipeline.prepare.tokenized import PreparedData, data_folder_name, load_prepared_data, prepare_data
from pipeline.workdir import CACHE_DIR


@dataclass
class Prepared:
    tokenizer: PreTrainedTokenizerBase
    data: PreparedData
    task: TaskInfo
    # the tokenizer's cache folder when it was trained here (None: loaded from the teacher's reference)
    tokenizer_dir: Path | None = None

    def folders(self, cache: Path) -> dict[str, str]:
        """The cache folders (names under `cache`) a Train worker loads this from, with
        `load_prepared`: the tokenized splits and the tokenizer, saved there if it came from a
        reference (a worker on another node may not reach the teacher's folder or the hub)."""
        tokenizer_dir = self.tokenizer_dir
        if tokenizer_dir is None:
            tokenizer_dir = cache / f"tokenizer-saved-{tokenizer_digest(self.tokenizer)}"
            atomic_dir(tokenizer_dir, self.tokenizer.save_pretrained)
        return {"data": data_folder_name(self.data.fingerprint), "tokenizer": tokenizer_dir.name}

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id or 0)


def task_info(data: PreparedData) -> TaskInfo:
    t = data.task
    return TaskInfo(name=t.name, num_labels=t.num_labels, regression=t.regression, label_names=tuple(t.label_names or ()))


def resolve_tokenizer(spec: SweepSpec, cache: Path) -> tuple[PreTrainedTokenizerBase, Path | None]:
    """The tokenizer, and its cache folder when it was trained offline here."""
    settings = spec.teacher.tokenizer
    if settings is None:
        given = spec.teacher.finetuned  # a fine-tuned folder has no revision; a hub teacher's tokenizer loads at its commit
        return load_tokenizer(given or spec.teacher.model, None if given else spec.teacher.revision), None
    # Trained offline on the training text: the key covers the text itself and the settings.
    raw = load_raw(spec.task)
    texts = train_texts(raw)
    key = digest({"texts": hashlib.sha256("\n".join(texts).encode()).hexdigest(), "settings": settings.model_dump()})

    def build(tmp: Path) -> None:
        train_wordpiece(texts, vocab_size=settings.vocab_size, lowercase=settings.lowercase).save_pretrained(tmp)

    # checked on reuse (small: hashed too) and rebuilt when damaged; one written before manifests
    # has nothing to check against, so a load that fails rebuilds it as well
    folder = atomic_dir(cache / f"tokenizer-{key}", build)
    try:
        return _load_tokenizer(folder), folder
    except CacheDamaged as e:
        discard(folder, e.problem)
    folder = atomic_dir(cache / f"tokenizer-{key}", build)
    return _load_tokenizer(folder), folder


def _load_tokenizer(folder: Path) -> PreTrainedTokenizerBase:
    with unreadable_as_damaged(folder):
        return AutoTokenizer.from_pretrained(str(folder))


def prepare(spec: SweepSpec, workdir: Path) -> Prepared:
    cache = workdir / CACHE_DIR
    tokenizer, tokenizer_dir = resolve_tokenizer(spec, cache)
    data = prepare_data(spec.task, tokenizer, cache)
    return Prepared(tokenizer=tokenizer, data=data, task=task_info(data), tokenizer_dir=tokenizer_dir)


def load_prepared(spec: SweepSpec, cache: Path, folders: dict[str, str]) -> Prepared:
    """What `prepare` made, from the cache folders `Prepared.folders` named: no data source or
    tokenizer reference is read, so it works on a node that has only the cache — and cannot
    rebuild it: a damaged folder is a `CacheDamaged` error naming it (the sweep rebuilds it)."""
    tokenizer_dir = cache / folders["tokenizer"]
    check_cache(tokenizer_dir)  # sizes only: this runs at every trial start; damaged: one line naming the folder
    tokenizer = _load_tokenizer(tokenizer_dir)
    data = load_prepared_data(spec.task, cache / folders["data"])
    return Prepared(tokenizer=tokenizer, data=data, task=task_info(data), tokenizer_dir=tokenizer_dir)
