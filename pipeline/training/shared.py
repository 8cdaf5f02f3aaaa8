"""Work a method shares across the trials of a workdir: built by one trial, loaded by the rest.

A method only declares the work (`Method.shared_work()`: what the artifact depends on and
which phases produce it) and writes or reads it in a folder it is handed (`save_shared`,
`load_shared`). Everything about files and processes is here: the folder named after the key,
the file lock that lets one trial build while the others with the same key wait, the decision
made on rank 0 and told to the other ranks through the process group's store (never in a
collective, which a long wait would time out) so that every rank runs the same phase plan, and
the publication by one atomic rename, so a reader never sees half an artifact. The loop makes
three calls:

    shared = SharedWorkCache.open(method, root, scope, dist)  # after build(), before phases()
    shared.before_phase(phase)                                 # before each start_phase
    shared.close()                                             # in a finally

Layout under `root` (`<workdir>/cache/methods`): `<method>-<digest>/`, the published artifact,
appears complete or not at all; `<method>-<digest>.lock` is the lock file, held by the trial
building it. The digest covers the method's key and `scope` (the teacher's cache key: task,
teacher, data and their settings), so trials of different teachers or data never share.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from methods.base import Method, Phase, SharedWork
from pipeline.training.engine import Distributed
from pipeline.workdir import atomic_folder


def artifact_name(method_name: str, scope: str, key: Mapping[str, Any]) -> str:
    """`<method>-<16 hex digits>`: the digest of the key with the scope added to it. For MiniLM
    this is the name its distillation cache had before the pipeline kept it (pinned in
    tests/unit/training/test_shared.py), so distilled students already cached stay in use."""
    if "scope" in key:
        raise ValueError(f"{method_name}'s shared-work key may not use the name 'scope': the pipeline adds it")
    blob = json.dumps({"scope": scope, **key}, sort_keys=True, default=str)
    return f"{method_name}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


# How often the other ranks look whether rank 0 has decided: a wait on the lock lasts as long
# as another trial's build (minutes), so a second's latency costs nothing.
POLL_S = 0.5
_opened = itertools.count()  # every rank opens the same caches in the same order: one key each


def _decided_on_rank_zero(published: bool | None, dist: Distributed, name: str) -> bool:
    """Rank 0's decision on every rank, so that every rank plans the same phases (a rank that
    looked for itself could find the artifact published a moment after rank 0 claimed it).

    Told through the process group's key-value store, not a collective: rank 0 decides only once
    it holds the lock or sees the artifact, which takes as long as another trial's build, and a
    collective that waits that long outlasts the group's timeout (NCCL's 1,800 s under Ray Train,
    whose async error handling then kills the trial). `store.check` returns at once, so the other
    ranks poll it, under no timeout (tests/unit/training/test_shared.py holds the lock longer than
    the group's timeout)."""
    key = f"drydock/shared/{next(_opened)}/{name}"
    if dist.world_size == 1 or not torch.distributed.is_initialized():
        return bool(published)
    # the default group's store: every rank of the trial reaches it (c10d keeps it private, with
    # no public accessor, in torch 2.x)
    store = torch.distributed.distributed_c10d._get_default_store()
    if dist.is_main:
        store.set(key, "1" if published else "0")
        return bool(published)
    while not store.check([key]):
        time.sleep(POLL_S)
    return store.get(key) == b"1"


class SharedWorkCache:
    """This trial's part in one shared artifact: loaded, being built here, or none at all."""

    def __init__(self, method: Method, work: SharedWork | None, folder: Path | None, lock: int | None):
        self.method, self.work, self.folder = method, work, folder
        self.loaded = False  # the artifact was loaded: the producing phases run with 0 steps
        self._lock = lock  # fd of the lock this trial holds while it builds the artifact
        self._done: set[str] = set()  # producing phases started so far

    @classmethod
    def open(cls, method: Method, root: Path | None, scope: str, dist: Distributed) -> SharedWorkCache:
        """Load the artifact if another trial published it (waiting while one builds it), or claim
        it for this trial to build. Without a root (no workdir) or shared work, nothing is shared."""
        work = method.shared_work() if root is not None else None
        if work is None or root is None:
            return cls(method, None, None, None)
        folder = Path(root) / artifact_name(method.name, scope, work.key)
        lock = _claim(folder) if dist.is_main else None  # rank 0 alone touches the lock
        shared = cls(method, work, folder, lock)
        if _decided_on_rank_zero(dist.is_main and lock is None, dist, folder.name):
            method.load_shared(folder)
            shared.loaded = True
        return shared

    @property
    def building(self) -> bool:
        return self._lock is not None

    def before_phase(self, phase: Phase) -> None:
        """Publish the artifact at the first phase after all its producing phases."""
        if self.work is None:
            return
        if phase.name in self.work.produced_by:
            self._done.add(phase.name)
        elif self.building and self._done >= set(self.work.produced_by):
            self._publish()

    def close(self) -> None:
        """Release the lock without publishing (a trial that failed while building): the next
        trial waiting for the artifact claims it and builds it."""
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)
            self._lock = None

    def _publish(self) -> None:
        assert self.folder is not None
        # one rename: readers see all of it or nothing; an abandoned folder of the earlier cache
        # (see _published) is replaced
        with atomic_folder(self.folder, replace=True) as scratch:
            self.method.save_shared(scratch)
        self.close()


def _published(folder: Path) -> bool:
    """Whether the artifact is there. Folders are published by one rename, so one that exists is
    whole, except a folder of the method-owned cache this one replaced (the names are the same,
    so a complete one of that time is reused): it held its `lock` file inside, and a trial that
    died while building left only that lock, perhaps with a `*.tmp` half-write beside it."""
    if not folder.is_dir():
        return False
    names = [entry.name for entry in folder.iterdir()]
    return "lock" not in names or any(name != "lock" and not name.endswith(".tmp") for name in names)


def _claim(folder: Path) -> int | None:
    """None when the artifact is published; else the fd of its lock, taken after waiting for any
    trial that holds it (that trial publishes, then unlocks, or dies and the lock goes with it)."""
    if _published(folder):
        return None
    folder.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder.with_name(folder.name + ".lock"), os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    if _published(folder):  # published while we waited
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return None
    return fd
