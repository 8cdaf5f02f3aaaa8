"""The work directory's caches: content keys, and folders that appear whole or not at all.

Cached outputs are written to a temporary folder and renamed into place, so a crash or two
processes racing never leave a half-written cache that a later run would trust.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def atomic_dir(final: Path, build: Callable[[Path], None]) -> Path:
    """Build into a temporary sibling, then rename: readers see all of it or nothing."""
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{time.time_ns()}")
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another process finished first: theirs is as good as ours
            if not final.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def folder_digest(folder: Path) -> str:
    """A content hash of a model folder: every file's relative name and bytes, memoised while no
    file's size or modification time changes (hashing reads every byte of the weights)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    signature = tuple((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _folder_digest(str(folder.resolve()), signature)


@functools.lru_cache(maxsize=16)
def _folder_digest(folder: str, signature: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in signature:
        digest.update(name.encode() + b"\0")
        with open(Path(folder) / name, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:16]
