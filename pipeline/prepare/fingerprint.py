"""The content key of a prepared dataset: everything that decides the tokenized splits' contents.

File sources hash the bytes of their files, so editing a file in place invalidates the cache even
when its size and mtime survive; the hub stands in with its name, config and commit.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from pipeline.config import TaskConfig
from pipeline.prepare.cache import folder_digest
from pipeline.prepare.data_files import source_files
from pipeline.prepare.glue_dir import glue_files
from pipeline.prepare.hub_datasets import dataset_revision, local_hub_folder
from pipeline.prepare.synthetic import SYNTHETIC_VERSION

# Bump when the cached layout or the tokenization changes, so stale caches are never reused.
CACHE_FORMAT = 1


def data_fingerprint(task_cfg: TaskConfig, tokenizer: PreTrainedTokenizerBase) -> str:
    """A short content hash of everything that decides the tokenized splits' contents."""
    return hash_json(fingerprint_content(task_cfg, tokenizer))



def fingerprint_content(cfg: TaskConfig, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    return {
        "cache_format": CACHE_FORMAT,
        "task": cfg.name,
        "source": cfg.resolved_source(),
        "data": _data_digest(cfg),
        "text_columns": cfg.text_columns,
        "label_column": cfg.label_column,
        "label_names": cfg.label_names,
        "num_labels": cfg.num_labels,
        "regression": cfg.regression,
        "tokenizer": tokenizer_digest(tokenizer),
        "truncation_side": tokenizer.truncation_side,
        "max_seq_length": cfg.max_seq_length,
        "max_train_samples": cfg.max_train_samples,
        "max_eval_samples": cfg.max_eval_samples,
        "sample_seed": cfg.sample_seed,
        # only when given, so that the caches of every task without a mapping keep their keys
        **({"splits": cfg.splits.model_dump(mode="json", exclude_none=True)} if cfg.splits is not None else {}),
    }


def tokenizer_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    """The backend's vocabulary and pipeline, without the truncation/padding state that every
    `tokenizer(..., truncation=True)` call rewrites (else the fingerprint drifts after first use)."""
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    state.pop("truncation", None)
    state.pop("padding", None)
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def _data_digest(cfg: TaskConfig) -> Any:
    """File sources hash their bytes; the hub has no local bytes, so its name, its config and the
    commit its revision names now stand in (a push to the dataset changes the fingerprint). A
    local folder in a hub layout has bytes and no commits: its files are hashed."""
    source = cfg.resolved_source()
    if source == "glue_dir":
        return {split: file_digest(path) for split, path in glue_files(cfg).items()}
    if source == "files":
        assert cfg.files is not None
        return {"format": cfg.files.format, **{split: file_digest(path) for split, path in source_files(cfg).items()}}
    if source == "synthetic":
        return {"version": SYNTHETIC_VERSION, **cfg.synthetic.model_dump(mode="json")}
    folder = local_hub_folder(cfg)
    if folder is not None:
        dataset_revision(cfg)  # a revision given for a folder is refused, not ignored
        return {"hub_path": cfg.hub_path, "hub_config": cfg.hub_config, "folder": folder_digest(folder)}
    return {"hub_path": cfg.hub_path, "hub_config": cfg.hub_config, "hub_revision": dataset_revision(cfg)}


def file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def hash_json(content: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
