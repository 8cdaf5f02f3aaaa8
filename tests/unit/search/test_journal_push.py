"""The study's journal reaches the work location in linear bytes, and a reader on another node
rebuilds it exactly, whatever point the writer reached."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.search.journal_push import JournalPublisher, fetch_journal, part_key
from pipeline.search.searcher import ConfigurationSearcher
from pipeline.storage import WorkStore
from tests.unit.search.test_searcher import METRIC, final, spec

KEY = "sweep/runs/r1/study.journal"


class CountingStore(WorkStore):
    """A real `file://` store that counts the bytes its pushes send (the store's own code runs)."""

    pushed = 0

    def push(self, key: str) -> None:
        CountingStore.pushed += sum(f.stat().st_size for f in [self.path(key)] if f.is_file())
        super().push(key)


def stores(tmp_path: Path, monkeypatch) -> tuple[WorkStore, WorkStore]:
    """The writer's store and a reader's on another node (its own mirror folder)."""
    uri = (tmp_path / "bucket").as_uri()
    (tmp_path / "bucket").mkdir()
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node-a"))
    writer = CountingStore.open(uri)
    CountingStore.pushed = 0
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node-b"))
    reader = WorkStore.open(uri)
    assert writer.is_remote and writer.path(KEY) != reader.path(KEY)
    return writer, reader


def append(store: WorkStore, line: str) -> None:
    path = store.path(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


def test_each_publish_sends_what_was_appended_and_the_whole_journal_only_when_it_doubles(tmp_path, monkeypatch):
    writer, reader = stores(tmp_path, monkeypatch)
    publish = JournalPublisher(writer, KEY)
    lines = [f'{{"op": {i}, "pad": "{"x" * 90}"}}' for i in range(400)]
    for n, line in enumerate(lines, start=1):
        append(writer, line)
        publish()
        if n in (1, 2, 3, 7, 50, 399, 400):  # a reader at any point rebuilds the journal exactly
            rebuilt = fetch_journal(reader, KEY)
            assert rebuilt is not None and rebuilt.read_bytes() == writer.path(KEY).read_bytes()
            reader.path(KEY).unlink()
    final_size = writer.path(KEY).stat().st_size
    # whole pushes at 1, 2, 4, 8, ... lines sum to under twice the size, the parts to once:
    # pushing it whole after every line would send about 400 / 2 times its size
    assert final_size < CountingStore.pushed < 3 * final_size
    assert 400 * final_size / 2 * 0.9 > 3 * final_size  # what the test tells apart
    publish()  # nothing appended: nothing sent
    assert CountingStore.pushed < 3 * final_size


def test_parts_a_whole_push_covers_are_deleted_and_one_left_behind_is_skipped_by_readers(tmp_path, monkeypatch):
    writer, reader = stores(tmp_path, monkeypatch)
    publish = JournalPublisher(writer, KEY)
    for i in range(3):  # whole at 1 line and at 2 (the appended bytes reach the whole's size), line 2 a part
        append(writer, f"line {i}")
        publish()
    bucket = tmp_path / "bucket"
    one_line = len("line 0\n")
    assert sorted(p.name for p in (bucket / f"{KEY}.parts").iterdir()) == [Path(part_key(KEY, 2 * one_line)).name]
    assert (bucket / KEY).stat().st_size == 2 * one_line and publish.parts == [part_key(KEY, 2 * one_line)]

    def refuse(key: str) -> None:
        raise OSError("delete refused")

    monkeypatch.setattr(writer, "delete", refuse)  # a kill between a whole push and the deletions
    for i in range(3, 5):
        append(writer, f"line {i}")
        publish()
    assert (bucket / KEY).stat().st_size == 4 * one_line  # whole again at 4 lines; line 2's part stays
    assert (bucket / part_key(KEY, 2 * one_line)).exists()
    rebuilt = fetch_journal(reader, KEY)
    assert rebuilt is not None and rebuilt.read_text() == "".join(f"line {i}\n" for i in range(5))


def test_no_journal_in_the_store_fetches_nothing(tmp_path, monkeypatch):
    _, reader = stores(tmp_path, monkeypatch)
    assert fetch_journal(reader, KEY) is None


@pytest.mark.parametrize("configurations", [24])
def test_a_searched_sweeps_study_pushes_bytes_linear_in_its_configurations(tmp_path, monkeypatch, configurations):
    """The searcher as `study_searcher` builds it for a remote location; each configuration's
    ask and tell are published, and the bytes sent stay a few times the final journal."""
    writer, reader = stores(tmp_path, monkeypatch)
    s = ConfigurationSearcher(spec(budget=configurations, seeds=(0,)), METRIC, str(writer.path(KEY)),
                              latency=lambda t: 5.0, publish=JournalPublisher(writer, KEY))
    for i in range(configurations):
        s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", final(0.5 + i / 100))
    size = writer.path(KEY).stat().st_size
    assert CountingStore.pushed < 3 * size  # whole after every publish: about `configurations` times
    rebuilt = fetch_journal(reader, KEY)
    assert rebuilt is not None and rebuilt.read_bytes() == writer.path(KEY).read_bytes()
