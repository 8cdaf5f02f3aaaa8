"""The work location: a local folder, or a URI that every node reaches without sharing a disk.

`--workdir runs` (a path) works as it always has: every stage reads and writes that folder, and
on a cluster every node must mount it. `--workdir s3://bucket/prefix` (or `file://`, `gs://`,
anything pyarrow or fsspec opens) needs no shared filesystem: the store is the one place of
record, and each process works in its node's mirror of it, a cache folder
(`$DRYDOCK_CACHE_DIR/work/<name>-<hash of the URI>`, default `~/.cache/drydock`), moving whole
files and folders at the points where one stage hands work to the next:

    what                                    written by (then pushed)        read by (pulled first)
    cache/data-*, cache/tokenizer-*          the sweep (prepare)             Train workers
    teachers/<key>, teachers/given-<digest>  the sweep or rank 0 (teacher)   Train workers, latency
    <sweep>/runs/<id>/trials/<key>/          rank 0 of the trial             the trial's driver, the sweep
    <sweep>/{state.json, results.parquet, report.*, pareto.*, latency.json}, <sweep>/runs/<id>/{spec.json,
    report.*, pareto.*, latency.json}, mlflow.db
                                             the sweep                       the sweep (resume, retrain)
    Tune's and Train's state                 Ray itself: its storage_path is the URI

Content-keyed folders (data, tokenizer, teacher, a finished trial's student) never change once
written, so a mirror that has one is not fetched again; the few mutable files (an outcome, the
run state) are fetched fresh. A folder counts in the store only once its push finished (a marker
file written last), arrives in the mirror whole or not at all (fetched into a temporary sibling,
then renamed), and a trial's outcome.json is pushed after everything it names.

Light on purpose: the per-trial driver imports it (pyarrow.fs is already loaded by Ray Train).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlparse

import pyarrow.fs as pafs

from pipeline.errors import DrydockError, first_line
from pipeline.workdir import atomic_folder, atomic_path, atomic_write

CACHE_ENV = "DRYDOCK_CACHE_DIR"
# Written last into every folder pushed: an object store shows a folder's first files while the
# rest are still on their way, and a reader must not take those for the whole folder.
COMPLETE = ".drydock-complete"


def cache_root() -> Path:
    """This node's cache folder: `$DRYDOCK_CACHE_DIR`, else `$XDG_CACHE_HOME/drydock`, else
    `~/.cache/drydock`. Never the current folder: a scheduled job's cwd is not a cache."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "drydock"


def is_uri(location: str | os.PathLike[str]) -> bool:
    """`s3://…`, `file://…`: a scheme of two or more letters (a Windows drive letter is one)."""
    scheme = urlparse(str(location)).scheme
    return len(scheme) > 1


@dataclass(frozen=True)
class WorkStore:
    """Where a sweep's work lives (`location`, as given), and this node's folder for it (`local`)."""

    location: str
    local: Path
    remote: str | None = None  # the URI root, without a trailing slash; None: `local` is the place of record

    @classmethod
    def open(cls, location: str | os.PathLike[str]) -> WorkStore:
        """The store at `location`; a URI's filesystem is resolved here, so a bad scheme or
        bucket fails now, naming --workdir, before any work."""
        text = str(location)
        if not is_uri(text):
            path = Path(text).expanduser().resolve()
            return cls(str(path), path)
        remote = text.rstrip("/")
        problem = check_uri(text)  # an unknown scheme, a missing driver or no bucket fails here
        if problem:
            raise DrydockError(f"--workdir: {problem}")
        digest = hashlib.sha256(remote.encode()).hexdigest()[:12]
        name = Path(urlparse(remote).path).name or urlparse(remote).netloc or "work"
        return cls(remote, cache_root() / "work" / f"{name}-{digest}", remote)

    @property
    def is_remote(self) -> bool:
        return self.remote is not None

    def uri(self, key: str) -> str:
        """`key`'s address in the store: what another node opens (and Ray's storage_path takes)."""
        return f"{self.remote}/{key}" if self.remote else str(self.local / key)

    def address(self, path: str | os.PathLike[str]) -> str:
        """How any node names `path` (a path of this node): its URI in the store when the work
        location is one and `path` lies in it, else the path itself. The one place a path's
        address is computed: what a results row, a latency job or a variant's row records."""
        key = self.key_of(path) if self.remote else None
        return str(path) if key is None else self.uri(key)

    def path(self, key: str) -> Path:
        """`key` in this node's folder (without fetching it)."""
        return self.local / key

    def key_of(self, ref: str | os.PathLike[str]) -> str | None:
        """The store key a path or URI names, or None if it lies outside the store."""
        text = str(ref)
        if self.remote and text.startswith(self.remote + "/"):
            return text[len(self.remote) + 1:]
        path = Path(text)
        if not path.is_absolute():
            return path.as_posix()
        try:
            return path.resolve().relative_to(self.local).as_posix()
        except ValueError:
            return None

    def check_writable(self) -> None:
        """Write and remove a probe: credentials, bucket and endpoint are checked before any work."""
        probe = f".drydock-probe-{os.getpid()}-{time.time_ns()}"
        if not self.remote:
            # mkdir of an existing folder succeeds whatever its permissions: a file must be written
            try:
                self.local.mkdir(parents=True, exist_ok=True)
                (self.local / probe).write_bytes(b"ok")
                (self.local / probe).unlink()
            except OSError as e:
                raise DrydockError(f"--workdir: cannot write to {self.local}: {e.strerror or type(e).__name__}") from None
            return
        try:
            fs, base = _filesystem(self.remote)
            fs.create_dir(base, recursive=True)
            with fs.open_output_stream(f"{base}/{probe}") as out:
                out.write(b"ok")
            fs.delete_file(f"{base}/{probe}")
        except Exception as e:  # noqa: BLE001 - any failure here is the location's, said plainly
            raise DrydockError(f"--workdir: cannot write to {self.remote}: {first_line(e)}") from None
        self.local.mkdir(parents=True, exist_ok=True)

    def exists(self, key: str) -> bool:
        """A file of the store, or a folder whose push finished (its marker is there)."""
        if not self.remote:
            return self.path(key).exists()
        return _kind(*_filesystem(self.remote), key) != pafs.FileType.NotFound

    def delete(self, key: str) -> None:
        """Remove `key` (a file or a folder) from the store and from this node's folder."""
        local = self.path(key)
        if local.is_dir():
            shutil.rmtree(local, ignore_errors=True)
        elif local.exists():
            local.unlink()
        if not self.remote:
            return
        (self.local / PUSHED_DIR / f"{key}.json").unlink(missing_ok=True)  # what this node noted of it
        shutil.rmtree(self.local / PUSHED_DIR / key, ignore_errors=True)
        fs, base = _filesystem(self.remote)
        info = fs.get_file_info(f"{base}/{key}")
        if info.type == pafs.FileType.Directory:
            fs.delete_dir(f"{base}/{key}")
        elif info.type == pafs.FileType.File:
            fs.delete_file(f"{base}/{key}")

    def read_files(self, key: str) -> dict[str, bytes]:
        """The files directly inside store folder `key`, name → bytes, read in one listing and one
        read each (no copy in this node's folder, no completion marker asked for: for small
        files pushed one by one, such as a study journal's parts); {} when there is none."""
        if not self.remote:
            folder = self.path(key)
            return {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()} if folder.is_dir() else {}
        fs, base = _filesystem(self.remote)
        found = fs.get_file_info(pafs.FileSelector(f"{base}/{key}", allow_not_found=True))
        out = {}
        for info in sorted(found, key=lambda i: i.path):
            if info.type == pafs.FileType.File:
                with fs.open_input_stream(info.path) as f:
                    out[info.base_name] = f.read()
        return out

    def fetch(self, key: str, *, fresh: bool = False) -> Path | None:
        """`key` (a file or a folder) in this node's folder, fetched from the store unless the
        mirror has it already (`fresh`: fetch anyway, for files that change); None when the store
        has no such key. A local store returns its path when it exists."""
        local = self.path(key)
        if not self.remote:
            return local if local.exists() else None
        if local.exists() and not fresh:
            return local
        fs, base = _filesystem(self.remote)
        info = fs.get_file_info(f"{base}/{key}")
        if info.type == pafs.FileType.File and local.is_file() and self._pushed_stamp(key) == _stamp(info):
            return local  # the store holds what this node last pushed: this node's copy is as new or newer
        kind = _kind(fs, base, key)
        if kind == pafs.FileType.NotFound:  # absent, or a folder still being pushed
            if fresh and local.is_file():
                local.unlink()  # the store is the record: a stale copy must not speak for it
            return None
        local.parent.mkdir(parents=True, exist_ok=True)
        if kind == pafs.FileType.File:
            with atomic_path(local) as scratch:
                _copy(fs, f"{base}/{key}", pafs.LocalFileSystem(), str(scratch))
            return local
        # a folder another process of this node fetched first stays: theirs is the same
        with atomic_folder(local, replace=fresh, create=False) as scratch:
            _copy(fs, f"{base}/{key}", pafs.LocalFileSystem(), str(scratch))
            (scratch / COMPLETE).unlink(missing_ok=True)  # the store's mark, not part of the folder
        return local

    def push(self, key: str, *, stamp: bool = True) -> None:
        """Copy `key` (a file or a folder of this node's folder) into the store. A pushed file's
        size and time in the store are noted (`fetch` keeps this node's copy while the store
        holds what it pushed); `stamp=False` for a file this node never fetches back."""
        if not self.remote:
            return
        local = self.path(key)
        if not local.exists():
            raise FileNotFoundError(local)
        fs, base = _filesystem(self.remote)
        if local.is_dir():  # a pushed-again folder is incomplete until its new marker lands
            _delete_marker(fs, f"{base}/{key}")
        _copy(pafs.LocalFileSystem(), str(local), fs, f"{base}/{key}")
        if local.is_file() and stamp:
            noted = self.local / PUSHED_DIR / f"{key}.json"
            noted.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(noted, json.dumps(_stamp(fs.get_file_info(f"{base}/{key}"))))
        if local.is_dir():
            with fs.open_output_stream(f"{base}/{key}/{COMPLETE}") as out:
                out.write(b"complete")

    def _pushed_stamp(self, key: str) -> dict[str, Any] | None:
        """The store's size and time of `key` just after this node last pushed it."""
        try:
            return cast(dict[str, Any], json.loads((self.local / PUSHED_DIR / f"{key}.json").read_text()))
        except (OSError, ValueError):
            return None

    def push_last(self, key: str, last: str) -> None:
        """Push folder `key`, its `last` child after every other one: a reader that waits for
        `last` (a trial's outcome.json) finds everything it names already there."""
        if not self.remote:
            return
        folder = self.path(key)
        for child in sorted(folder.iterdir()):
            if child.name != last and not child.name.startswith("."):
                self.push(f"{key}/{child.name}")
        if (folder / last).exists():
            self.push(f"{key}/{last}")

    def localize(self, ref: str | os.PathLike[str], *, fresh: bool = False) -> Path:
        """A student's or teacher's path as a results row or an outcome gives it (a URI of the
        store, a key, or a path of this node) as a folder of this node, fetched when needed
        (`fresh`: even if this node has a copy — a trial's export, which a retry elsewhere may
        have replaced)."""
        key = self.key_of(ref)
        if key is None or not self.remote:
            return Path(str(ref)) if key is None else self.path(key)
        found = self.fetch(key, fresh=fresh)
        return found if found is not None else self.path(key)


def _kind(fs: pafs.FileSystem, base: str, key: str) -> pafs.FileType:
    """File, Directory (only a folder whose push finished), or NotFound."""
    kind = fs.get_file_info(f"{base}/{key}").type
    if kind == pafs.FileType.Directory and fs.get_file_info(f"{base}/{key}/{COMPLETE}").type != pafs.FileType.File:
        return pafs.FileType.NotFound
    return kind


def _delete_marker(fs: pafs.FileSystem, folder: str) -> None:
    if fs.get_file_info(f"{folder}/{COMPLETE}").type == pafs.FileType.File:
        fs.delete_file(f"{folder}/{COMPLETE}")


def _copy(src_fs: pafs.FileSystem, src: str, dst_fs: pafs.FileSystem, dst: str) -> None:
    """A file, or a folder's every file, from one filesystem to the other. File by file: an
    object store has no folders to list (pyarrow's selector copy expects the local ones to exist)."""
    if src_fs.get_file_info(src).type == pafs.FileType.File:
        files = [(src, dst)]
    else:
        found = src_fs.get_file_info(pafs.FileSelector(src, recursive=True))
        files = [(f.path, f"{dst}/{f.path[len(src) + 1:]}") for f in found if f.type == pafs.FileType.File]
        dst_fs.create_dir(dst, recursive=True)
    for source, target in files:
        dst_fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        pafs.copy_files(source, target, source_filesystem=src_fs, destination_filesystem=dst_fs)


# URIs of these schemes name a bucket first. The spec's checks keep the same table
# (`pipeline.config.OBJECT_STORE_SCHEMES`: neither layer imports the other; a test holds them equal).
OBJECT_STORE_SCHEMES = frozenset({"s3", "gs", "gcs", "abfs", "abfss", "az"})


# Beside a node's mirror: what the store held of each file just after this node pushed it. A
# file of the store that still matches was not pushed since by another node, so this node's
# copy (perhaps written after that push by a driver killed before the next) is the newer one.
PUSHED_DIR = ".drydock-pushed"


def _stamp(info: pafs.FileInfo) -> dict[str, Any]:
    return {"size": info.size, "mtime_ns": info.mtime_ns}


def check_uri(uri: str) -> str | None:
    """What is wrong with a work location or storage URI, said before any work (None: nothing):
    a scheme no filesystem serves (`ftp://` failed only after the teacher, as a traceback), or an
    object store URI without a bucket (`s3://` tried to create a bucket '')."""
    parsed = urlparse(uri)
    if parsed.scheme in OBJECT_STORE_SCHEMES and not parsed.netloc:
        return f"{uri} names no bucket; give {parsed.scheme}://<bucket>/<prefix>"
    try:
        _filesystem(uri)
    except DrydockError as e:
        return str(e).removeprefix("--workdir: ")
    return None


# The variables a filesystem reads when it is opened (endpoint, credentials, region): a changed
# one opens the URI anew.
_SETTINGS_PREFIXES = ("AWS_", "GOOGLE_", "GCS_", "AZURE_", "STORAGE_EMULATOR_HOST")


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for the URI (it reads the standard AWS/GCS variables, e.g.
    AWS_ENDPOINT_URL for an S3-compatible server), else fsspec's through pyarrow's handler.

    Opened once per URI and settings, and kept: opening an S3 filesystem builds an AWS client and
    asks the bucket's region (a request), and a sweep's driver fetches and pushes a few files
    per trial; a profile of its store work found a third of it opening (benchmarks/RESULTS.md,
    "The driver's S3 work"). Arrow's filesystems are safe to share between threads."""
    settings = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_SETTINGS_PREFIXES)))
    return _opened(uri, settings)


@functools.lru_cache(maxsize=64)
def _opened(uri: str, settings: tuple[tuple[str, str], ...]) -> tuple[pafs.FileSystem, str]:
    """`_filesystem`'s cache: `settings` is only the key."""
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path.rstrip("/")
    except (ValueError, OSError) as arrow_error:  # pyarrow's ArrowInvalid is a ValueError
        try:
            import fsspec
            from pyarrow.fs import FSSpecHandler, PyFileSystem

            fs, _, paths = fsspec.get_fs_token_paths(uri)
            return PyFileSystem(FSSpecHandler(fs)), paths[0].rstrip("/")
        except Exception as e:  # noqa: BLE001
            raise DrydockError(f"--workdir: cannot open {uri}: {str(arrow_error).strip() or e}") from None


# Dropped before pyarrow's own exit handler (registered when pyarrow.fs was imported, above, so it
# runs after this one): an S3 filesystem still alive then can keep the interpreter from exiting
# (docs/stack-facts.md, "Work locations").
atexit.register(_opened.cache_clear)
