"""The work directory's caches: content keys, and folders that appear whole or not at all.

Cached outputs are written to a temporary folder and renamed into place, so a crash or two
processes racing never leave a half-written cache that a later run would trust.

Verified on read: every cache folder gets a manifest (`MANIFEST`: each file's size and sha256),
written inside the temporary folder before the rename, and a reused cache is checked against it
(`cache_problem`). What a check costs decides where each kind runs:

- sizes (a `stat` per file: microseconds) on every reuse — a Train worker loading the data cache
  at each trial start, the unlabeled-text cache of every distilling trial. A truncated file (a
  disk that filled up, a copy cut short) is caught here;
- sizes and sha256 (reads every byte: about a second per GB) where the cache is reused once per
  sweep by the process that would rebuild it — the tokenized data and tokenizers in the prepare
  stage, the fine-tuned teacher in the teacher stage — memoised in the process while no file's
  size or mtime changes. Same-size damage (bytes rewritten in place) is caught here only.

A damaged data or tokenizer cache is moved aside and rebuilt (seconds to minutes); a damaged
teacher is named in the error instead (`pipeline.training.teacher.existing_teacher`): rebuilding
it is a fine-tune. Caches written before manifests existed are accepted as they are — no user
rebuilds anything — and checked lazily: a teacher's safetensors files against their own header
(the length it declares), a data or tokenizer cache by reading it (unreadable: rebuilt).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.errors import DrydockError, first_line
from pipeline.workdir import atomic_folder, scratch_name

logger = logging.getLogger(__name__)

MANIFEST = ".drydock-manifest.json"
_MANIFEST_FORMAT = 1
# Ours (the manifest, the store's completion marker `pipeline.storage.COMPLETE`): never listed in a manifest.
_OWN_PREFIX = ".drydock-"
REBUILT = "delete that folder and run again: it is rebuilt"


class CacheDamaged(DrydockError):
    """A cache folder fails its check; one line naming the folder, what is wrong and what to do."""

    def __init__(self, folder: Path, problem: str, remedy: str = REBUILT, what: str = "cache:"):
        self.folder, self.problem = folder, problem
        super().__init__(f"{what} {folder} is damaged ({problem}); {remedy}")


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_manifest(folder: Path) -> None:
    """Record every file's size and sha256 in `folder/MANIFEST`: the last thing a build writes,
    inside the temporary folder, before the rename that publishes it. Hashing here costs little
    (the bytes were just written and are in the page cache) next to building them."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(_OWN_PREFIX)):
        with open(path, "rb") as f:
            files[path.relative_to(folder).as_posix()] = {"size": path.stat().st_size,
                                                          "sha256": hashlib.file_digest(f, "sha256").hexdigest()}
    (folder / MANIFEST).write_text(json.dumps({"format": _MANIFEST_FORMAT, "files": files}, indent=1, sort_keys=True))


def cache_problem(folder: Path, *, deep: bool = False) -> str | None:
    """What is wrong with a cache folder, or None. With a manifest: every file it lists is there
    at its recorded size and, with `deep`, has its recorded sha256. Without one (written before
    manifests existed): accepted, after the one check that needs no record — each safetensors
    file is as long as its header says."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return _unrecorded_problem(folder)
    try:
        files = json.loads(manifest.read_text())["files"]
        entries = sorted((str(name), int(entry["size"]), str(entry["sha256"])) for name, entry in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"its {MANIFEST} is unreadable"
    signature = []
    for name, size, sha256 in entries:
        try:
            stat = (folder / name).stat()
        except OSError:
            return f"{name} is missing"
        if stat.st_size != size:
            return f"{name} is {stat.st_size} bytes, {size} were written"
        signature.append((name, stat.st_size, stat.st_mtime_ns, sha256))
    return _hash_problem(str(folder.resolve()), tuple(signature)) if deep else None


def check_cache(folder: Path, *, deep: bool = False, remedy: str = REBUILT, what: str = "cache:") -> None:
    """`cache_problem`, raised as `CacheDamaged`."""
    problem = cache_problem(folder, deep=deep)
    if problem is not None:
        raise CacheDamaged(folder, problem, remedy, what)


@contextmanager
def unreadable_as_damaged(folder: Path, remedy: str = REBUILT, what: str = "cache:") -> Iterator[None]:
    """A library's read error inside (a truncated Arrow file the manifest could not catch,
    because the cache predates manifests) as `CacheDamaged`, naming the folder."""
    try:
        yield
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise CacheDamaged(folder, f"unreadable: {first_line(e, 160)}", remedy, what) from e


def discard(folder: Path, problem: str) -> None:
    """Move a damaged cache aside (one rename: readers see it whole or gone), then delete it."""
    logger.warning("cache: %s is damaged (%s); rebuilding it", folder, problem)
    aside = scratch_name(folder, "damaged")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:  # another process moved it first
        return
    shutil.rmtree(aside, ignore_errors=True)


@functools.lru_cache(maxsize=64)
def _hash_problem(folder: str, signature: tuple[tuple[str, int, int, str], ...]) -> str | None:
    """Memoised on every file's size and mtime: a driver that checks the teacher twice reads it once."""
    for name, _, _, expected in signature:
        with open(Path(folder) / name, "rb") as f:
            if hashlib.file_digest(f, "sha256").hexdigest() != expected:
                return f"{name} does not match its recorded sha256"
    return None


def _unrecorded_problem(folder: Path) -> str | None:
    for path in sorted(folder.rglob("*.safetensors")):
        problem = _safetensors_problem(path)
        if problem is not None:
            return f"{path.relative_to(folder).as_posix()} {problem}"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is 8 bytes of header length, the JSON header, then exactly the bytes its
    tensors' offsets span: a truncated one is found from its first kilobytes, without loading it."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 <= length <= size - 8:
            return f"is {size} bytes, too short for its header"
        try:
            header = json.loads(f.read(length))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return "has an unreadable header"
    if size != 8 + length + end:
        return f"is {size} bytes, its header describes {8 + length + end}"
    return None


def atomic_dir(final: Path, build: Callable[[Path], object], *, deep: bool = True, create: bool = False) -> Path:
    """Build into a temporary sibling (`create`: made before `build` runs, else `build` makes
    it), write its manifest, then rename: readers see all of it or nothing. An existing folder is
    reused if it passes its check (`deep`: hashes too), else it is discarded and built again."""
    if final.exists():
        problem = cache_problem(final, deep=deep)
        if problem is None:
            return final
        discard(final, problem)
    with atomic_folder(final, create=create) as tmp:  # another process that finishes first wins: theirs is as good as ours
        build(tmp)
        write_manifest(tmp)
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
