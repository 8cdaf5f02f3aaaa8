"""The tokenized Arrow cache: each task tokenized once, under `<cache_dir>/data-<fingerprint>/`.

The cache is written to a temporary folder and renamed into place, so concurrent trials never read
half a cache, with a manifest of its files' sizes and hashes that every reuse checks
(`pipeline.prepare.cache`): a damaged cache is rebuilt.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from transformers import PreTrainedTokenizerBase

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.cache import CacheDamaged, cache_problem, check_cache, discard, unreadable_as_damaged, write_manifest
from pipeline.prepare.data_files import read_utf8
from pipeline.prepare.fingerprint import data_fingerprint, file_digest, fingerprint_content, hash_json
from pipeline.prepare.hub_datasets import reads_hub_label_names, resolved_task
from pipeline.prepare.sources import load_raw, subsample
from pipeline.prepare.tasks import TaskSpec, task_spec
from pipeline.workdir import atomic_folder

SOURCE_FILE = "source.json"  # in a hub dataset's cache folder: the commit its rows came from, its label names


@dataclass
class PreparedData:
    """Tokenized, unpadded splits ready for the loop (which pads each batch dynamically)."""

    task: TaskSpec
    train: datasets.Dataset
    dev: dict[str, datasets.Dataset]
    fingerprint: str
    num_train: int
    revision: str | None = None  # the hub dataset's commit (None: not from the hub)


_TOKEN_FEATURES = {
    "input_ids": datasets.List(datasets.Value("int64")),
    "attention_mask": datasets.List(datasets.Value("int64")),
    "token_type_ids": datasets.List(datasets.Value("int64")),
}



def prepare_data(task_cfg: TaskConfig, tokenizer: PreTrainedTokenizerBase, cache_dir: Path) -> PreparedData:
    """Load, validate, subsample and tokenize the task, or reload it from the cache."""
    _configure_progress()
    task_cfg, spec = resolved_task(task_cfg)
    fingerprint = data_fingerprint(task_cfg, tokenizer)

    def build(folder: Path) -> None:
        raw = load_raw(task_cfg)
        for split in ("train", *spec.dev_splits):
            limit = task_cfg.max_train_samples if split == "train" else task_cfg.max_eval_samples
            rows = subsample(raw[split], limit, task_cfg.sample_seed)
            _tokenize(rows, tokenizer, task_cfg.max_seq_length, f"{fingerprint}-{split}").save_to_disk(str(folder / split))
        if task_cfg.resolved_source() == "hub":  # the commit and the names travel with the cache (to Train workers, drydock.json)
            source = {"hub_path": task_cfg.hub_path, "revision": task_cfg.hub_revision, "label_names": task_cfg.label_names}
            (folder / SOURCE_FILE).write_text(json.dumps(source))

    # reused once per sweep here, by the process that can rebuild it: sizes and hashes
    return _load_cached(Path(cache_dir), data_folder_name(fingerprint), build, lambda f: load_prepared_data(task_cfg, f), deep=True)


def data_folder_name(fingerprint: str) -> str:
    """The cache folder of the tokenized splits with this fingerprint."""
    return f"data-{fingerprint}"


def load_prepared_data(task_cfg: TaskConfig, folder: Path) -> PreparedData:
    """The tokenized splits `prepare_data` cached in `folder`, without the source: a Train worker
    on another node has the cache (fetched from the work location), not the task's files.
    The folder is checked against its manifest's sizes first (a stat per file: this runs at every
    trial start); a damaged one is a `CacheDamaged` naming it (`prepare_data` rebuilds it).
    A hub task's label names read from its ClassLabel are in the cache too: a config that was not
    pinned (a resumed sweep's, which keeps only the commit) still gets the names it was built with."""
    check_cache(folder)
    with unreadable_as_damaged(folder):
        source = json.loads((folder / SOURCE_FILE).read_text()) if (folder / SOURCE_FILE).is_file() else {}
    if source.get("label_names") is not None and reads_hub_label_names(task_cfg):
        task_cfg = task_cfg.model_copy(update={"label_names": list(source["label_names"])})
    spec = task_spec(task_cfg)
    with unreadable_as_damaged(folder):
        train = datasets.load_from_disk(str(folder / "train"))
        dev = {split: datasets.load_from_disk(str(folder / split)) for split in spec.dev_splits}
    fingerprint = folder.name.removeprefix("data-")
    return PreparedData(task=spec, train=train, dev=dev, fingerprint=fingerprint, num_train=len(train), revision=source.get("revision"))


def prepare_unlabeled(
    task_cfg: TaskConfig,
    tokenizer: PreTrainedTokenizerBase,
    cache_dir: Path,
    max_samples: int | None,
    files: Sequence[str],
) -> datasets.Dataset:
    """Label-free text for distillation: a seeded subsample of the task's training texts (up to
    `max_samples`; `max_train_samples` does not apply) followed by every non-blank line of the
    extra text files, tokenized like `prepare_data` and cached the same way."""
    _configure_progress()
    task_cfg, _ = resolved_task(task_cfg)  # a bad task config fails here, before any tokenizing
    extra = [Path(f) for f in files]
    for path in extra:
        if not path.is_file():
            raise DataError(f"{path}: file not found (extra unlabeled text)")
    content = fingerprint_content(task_cfg, tokenizer)
    for unused in ("max_train_samples", "max_eval_samples"):
        del content[unused]
    content.update(kind="unlabeled", max_samples=max_samples, extra=[file_digest(p) for p in extra])
    fingerprint = hash_json(content)

    def build(folder: Path) -> None:
        task_rows = subsample(load_raw(task_cfg)["train"].remove_columns("label"), max_samples, task_cfg.sample_seed)
        parts = [_tokenize(task_rows, tokenizer, task_cfg.max_seq_length, f"{fingerprint}-task")]
        lines = [line.strip() for path in extra for line in read_utf8(path).splitlines() if line.strip()]
        if lines:
            extra_rows = datasets.Dataset.from_dict({"text_a": lines}, features=datasets.Features({"text_a": datasets.Value("string")}))
            parts.append(_tokenize(extra_rows, tokenizer, task_cfg.max_seq_length, f"{fingerprint}-extra"))
        datasets.concatenate_datasets(parts).save_to_disk(str(folder))

    def load(folder: Path) -> datasets.Dataset:
        check_cache(folder)
        with unreadable_as_damaged(folder):
            return datasets.load_from_disk(str(folder))

    # reused at every distilling trial's start: sizes only (a stat per file), no hashing
    return _load_cached(Path(cache_dir), f"unlabeled-{fingerprint}", build, load, deep=False)


def _tokenize(rows: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, max_length: int, fingerprint: str) -> datasets.Dataset:
    """Truncate but never pad: the loop pads each batch to its own longest row."""
    pair = "text_b" in rows.column_names
    labelled = "label" in rows.column_names
    features = dict(_TOKEN_FEATURES)
    if labelled:
        features["labels"] = rows.features["label"]

    def encode(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        texts = (batch["text_a"], batch["text_b"]) if pair else (batch["text_a"],)
        encoded = tokenizer(*texts, truncation=True, max_length=max_length, return_token_type_ids=True, return_attention_mask=True)
        out = {name: encoded[name] for name in _TOKEN_FEATURES}
        if labelled:
            out["labels"] = batch["label"]
        return out

    return rows.map(
        encode,
        batched=True,
        remove_columns=rows.column_names,
        features=datasets.Features(features),
        keep_in_memory=True,
        new_fingerprint=fingerprint,  # ours already covers the data and tokenizer; skips hashing the function
        desc="tokenizing",
    )


def _load_cached(cache_dir: Path, name: str, build: Callable[[Path], None], load: Callable[[Path], Any], *, deep: bool) -> Any:
    """`load` of the cache `_cached` gives; a cache that verified but cannot be read (one written
    before manifests, truncated) is discarded and built again, once."""
    folder = _cached(cache_dir, name, build, deep=deep)
    try:
        return load(folder)
    except CacheDamaged as e:
        discard(folder, e.problem)
    return load(_cached(cache_dir, name, build, deep=deep))


def _cached(cache_dir: Path, name: str, build: Callable[[Path], None], *, deep: bool = True) -> Path:
    """`cache_dir/name`, built once: into a temporary folder renamed into place, so a reader only
    ever sees a complete cache. Two processes racing both build; the loser discards its copy.
    The build's manifest is written before the rename; an existing cache is reused only if it
    passes its check (`deep`: sha256 too, else sizes: `pipeline.prepare.cache`), else rebuilt."""
    final = cache_dir / name
    if final.is_dir():
        problem = cache_problem(final, deep=deep)
        if problem is None:
            return final
        discard(final, problem)
    with atomic_folder(final) as scratch:
        build(scratch)
        write_manifest(scratch)
    return final


def _configure_progress() -> None:
    """Progress bars help on a terminal and only clutter logs of Ray workers and CI."""
    if not sys.stderr.isatty():
        datasets.disable_progress_bars()
