"""The study's journal in the work location, kept current in bytes linear in the sweep's length.

The searcher publishes its study after every ask, tell and Tune snapshot, so that a resume on
another machine finds every configuration Tune's snapshot can name (`pipeline.search.searcher`).
Pushed whole each time, a sweep of N configurations pushes about N² / 2 journal lines: measured
with `benchmarks/sweep_scale.py --algorithm motpe` on a `file://` location (benchmarks/RESULTS.md,
"A searched sweep of 1,000 configurations"). An Optuna journal only grows (every ask and tell is
appended as one line), so a publish pushes only what was appended since the last one, as a part
named by the byte offset it starts at (`<journal>.parts/<offset>`), and pushes the journal whole
once the parts since its last whole push reach its size: whole pushes sum to under twice the
final size, parts to once. The run's files are pushed whole at the sweep's end
(`pipeline.search.state.push_run_files`), so a finished sweep's journal needs no parts.

A reader (`fetch_journal`) takes the whole journal, then the part that starts where it ends, and
so on: a part that starts before the whole journal's end is already in it, so a kill between a
whole push and the deletion of the parts it covers leaves nothing to count twice.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pipeline.storage import WorkStore
from pipeline.workdir import atomic_write

logger = logging.getLogger(__name__)
PARTS = ".parts"  # beside the journal: `<journal>.parts/<offset>`
OFFSET_DIGITS = 15  # zero-padded, so that the parts sort in the journal's order


def part_key(key: str, offset: int) -> str:
    return f"{key}{PARTS}/{offset:0{OFFSET_DIGITS}d}"


class JournalPublisher:
    """`publish()` after each append: the store's journal plus its parts hold the local journal."""

    def __init__(self, store: WorkStore, key: str) -> None:
        self.store, self.key = store, key
        self.whole = 0  # the journal's size at its last whole push; none yet: the first publish is whole
        self.pushed = 0  # bytes the store holds, the whole journal and its parts together
        self.parts: list[str] = []  # pushed since the last whole push

    def __call__(self) -> None:
        self.publish()

    def publish(self) -> None:
        local = self.store.path(self.key)
        size = local.stat().st_size if local.is_file() else 0
        if size <= self.pushed:
            return
        if size - self.whole >= self.whole:
            self.store.push(self.key)
            self.whole = self.pushed = size
            stale, self.parts = self.parts, []
            for key in stale:  # covered by the whole journal; one left behind by a failure is skipped by readers
                try:
                    self.store.delete(key)
                except Exception:  # noqa: BLE001 - a part left in the store costs a few bytes, not the sweep
                    logger.warning("search: could not delete %s from the work location", key)
            return
        with local.open("rb") as f:
            f.seek(self.pushed)
            appended = f.read(size - self.pushed)
        key = part_key(self.key, self.pushed)
        self.store.path(key).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.store.path(key), appended)
        self.store.push(key)
        self.store.path(key).unlink(missing_ok=True)  # the local journal holds these bytes already
        self.parts.append(key)
        self.pushed += len(appended)


def fetch_journal(store: WorkStore, key: str) -> Path | None:
    """The store's journal in this node's folder, with every part that continues it appended;
    None when the store holds none."""
    local = store.fetch(key, fresh=True)
    if local is None:
        return None
    size = local.stat().st_size
    while store.exists(part_key(key, size)):
        part = store.fetch(part_key(key, size), fresh=True)
        if part is None:
            break
        appended = part.read_bytes()
        part.unlink()
        if not appended:
            break
        with local.open("ab") as f:
            f.write(appended)
        size += len(appended)
    return local
