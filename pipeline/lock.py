"""One run of a spec at a time: the lock `drydock sweep` and `drydock retrain` share.

Two runs of one spec in one work directory would write the same folders, results table, MLflow
parent run and registry versions. So both commands take an exclusive OS lock (`fcntl.flock`) on
a file in a local folder the caller chooses (`<workdir>/<spec name>/` for a folder work
directory) before any work, and neither waits for it: `drydock retrain` reports "skipped" and
exits 1 (the next scheduled run tries again), `drydock sweep` refuses with the holder named and
exits 1. The OS drops the lock when its holder's process ends, however it ends, so a killed run
never leaves a stale lock behind; the file itself stays (holding the last holder's line).
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.workdir import LOCK_FILE as LOCK_FILE


class Locked(RuntimeError):
    """Another run of the same spec holds the lock; `holder` is the line it wrote."""

    def __init__(self, path: Path, holder: str):
        self.path = path
        self.holder = holder
        super().__init__(f"another run of this spec holds its lock: {holder} ({path})")


def holder_line(purpose: str) -> str:
    """Who holds the lock, for whoever is refused: what, which process, where, since when."""
    return f"{purpose}, pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"


@contextmanager
def spec_lock(folder: Path, purpose: str) -> Iterator[None]:
    """Hold the lock of the spec whose local folder is `folder` (created if missing) for the
    block; raises `Locked` at once, naming the holder, when another process holds it. `purpose`
    says what holds it (`drydock sweep sst2`)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise Locked(path, handle.read().strip() or "another process (it has not written its name yet)") from None
        handle.seek(0)
        handle.truncate()
        handle.write(holder_line(purpose))
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
