"""The study's journal in the work location, kept current in bytes linear in the sweep's length.

The searcher publishes its study after every ask, tell and Tune snapshot, so that a resume on
another machine finds every configuration Tune's snapshot can name (`pipeline.search.searcher`).
Pushed whole each time, a study of N configurations sends about N² / 2 journal lines
(benchmarks/RESULTS.md, "A searched sweep of 1,000 configurations"). An Optuna journal only grows
(every ask and tell is appended as one line), so a publish pushes only what was appended since
the last one, as a part named by the byte offset it starts at (`<journal>.parts/<offset>`), and
pushes the journal whole once the parts since its last whole push reach its size: whole pushes
sum to under twice the final size, parts to once. Each whole push deletes every part beside the
journal, earlier drivers' included (a resumed sweep's publisher starts with one), and no part is
pushed until that deletion succeeded. The run's files are pushed whole at the sweep's end
(`pipeline.search.state.push_run_files`), the journal with them.

A reader (`fetch_journal`) takes the whole journal, then the part that starts where it ends, and
so on: a part that starts before the whole journal's end is already in it, so one left behind
is never counted twice.
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
        self.parts_clean = False  # no part in the store but this publisher's own since its last whole push
        self.warned = False  # a location that refuses deletes is said once

    def __call__(self) -> None:
        self.publish()

    def publish(self) -> None:
        local = self.store.path(self.key)
        size = local.stat().st_size if local.is_file() else 0
        if size <= self.pushed:
            return
        if size - self.whole >= self.whole or not self._clean():
            self.store.push(self.key)
            self.whole = self.pushed = size
            self.parts_clean = False  # the parts it covers go now, or before the next part
            self._clean()
            return
        with local.open("rb") as f:
            f.seek(self.pushed)
            appended = f.read(size - self.pushed)
        key = part_key(self.key, self.pushed)
        self.store.path(key).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.store.path(key), appended)
        try:
            self.store.push(key, stamp=False)
        finally:
            self.store.path(key).unlink(missing_ok=True)  # the local journal holds these bytes already
        self.pushed += len(appended)

    def _clean(self) -> bool:
        """Delete every part beside the journal (those of earlier runs and drivers included: one
        of them could sit at the offset this publisher's next part takes, and a reader would take
        it for the continuation); until that succeeds the journal is pushed whole."""
        if not self.parts_clean:
            try:
                self.store.delete(f"{self.key}{PARTS}")
                self.parts_clean = True
            except Exception as e:  # noqa: BLE001 - the next publish tries again; meanwhile whole pushes stay correct
                if not self.warned:
                    logger.warning("search: could not delete %s%s from the work location (%s); the study is pushed "
                                   "whole until it can", self.key, PARTS, e)
                self.warned = True
        return self.parts_clean


def fetch_journal(store: WorkStore, key: str) -> Path | None:
    """The store's journal in this node's folder, with every part that continues it appended;
    None when neither holds one. When the store holds what this node last pushed whole, the
    node's journal is as new or newer and is kept (`WorkStore.fetch`); when the store holds none
    (every publish failed), the node's journal is kept too. A fetch that fails halfway puts the
    node's journal back as it was (or removes it) before raising: a journal cut short and taken
    for the study would lose asks and tells that Tune's snapshot names. A last line cut short (a
    push killed midway on a filesystem that writes in place) is dropped: Optuna skips it on read,
    but the next append would join it and make the journal unreadable."""
    local = store.path(key)
    before = local.read_bytes() if local.is_file() else None
    try:
        if store.fetch(key, fresh=True) is None:
            if before is None:
                return None
            logger.warning("search: the work location holds no %s; this node's own is kept", key)
            journal = before
        else:
            journal = local.read_bytes()
            parts = store.read_files(f"{key}{PARTS}")  # one listing: a resume after 1,000 configurations may find hundreds
            while parts.get(Path(part_key(key, len(journal))).name):
                journal += parts[Path(part_key(key, len(journal))).name]
        atomic_write(local, journal[:journal.rfind(b"\n") + 1])
    except BaseException:
        if before is None:
            local.unlink(missing_ok=True)
        else:
            atomic_write(local, before)
        raise
    return local
