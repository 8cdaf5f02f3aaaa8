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

    def push(self, key: str, *, stamp: bool = True) -> None:
        CountingStore.pushed += sum(f.stat().st_size for f in [self.path(key)] if f.is_file())
        super().push(key, stamp=stamp)


def stores(tmp_path: Path, monkeypatch) -> tuple[WorkStore, WorkStore]:
    """The writer's store and a reader's on another node (its own mirror folder)."""
    uri = (tmp_path / "bucket").as_uri()
    (tmp_path / "bucket").mkdir()
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node-a"))
    writer = CountingStore.open(uri)
    CountingStore.pushed = 0
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node-b"))
    reader = CountingStore.open(uri)  # a subclass: a test may replace one of its methods
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
    sent = CountingStore.pushed
    publish()  # nothing appended: nothing sent
    assert CountingStore.pushed == sent
    # parts are pushed without the stamp `fetch` compares: none noted, none left in the node's folder
    assert not list((writer.local / ".drydock-pushed").rglob("*.parts/*"))
    assert not writer.path(f"{KEY}.parts").exists() or not any(writer.path(f"{KEY}.parts").iterdir())


def test_a_whole_push_deletes_the_parts_and_until_it_can_the_journal_goes_whole(tmp_path, monkeypatch):
    writer, reader = stores(tmp_path, monkeypatch)
    publish = JournalPublisher(writer, KEY)
    one_line = len("line 0\n")
    for i in range(3):  # whole at 1 line and at 2 (the appended bytes reach the whole's size), line 2 a part
        append(writer, f"line {i}")
        publish()
    bucket = tmp_path / "bucket"
    assert sorted(p.name for p in (bucket / f"{KEY}.parts").iterdir()) == [Path(part_key(KEY, 2 * one_line)).name]
    assert (bucket / KEY).stat().st_size == 2 * one_line

    def refuse(key: str) -> None:
        raise OSError("delete refused")

    real_delete = writer.delete
    monkeypatch.setattr(writer, "delete", refuse)
    for i in range(3, 6):  # whole at 4 lines, whose parts cannot go: lines 4 and 5 go whole, not as parts
        append(writer, f"line {i}")
        publish()
        assert (bucket / KEY).stat().st_size == (i + 1) * one_line  # every line goes whole
    assert sorted(p.name for p in (bucket / f"{KEY}.parts").iterdir()) == [Path(part_key(KEY, 2 * one_line)).name]
    monkeypatch.setattr(writer, "delete", real_delete)
    append(writer, "line 6")
    publish()  # the parts go first, then line 6 goes as a part again
    assert [p.name for p in (bucket / f"{KEY}.parts").iterdir()] == [Path(part_key(KEY, 6 * one_line)).name]
    rebuilt = fetch_journal(reader, KEY)
    assert rebuilt is not None and rebuilt.read_text() == "".join(f"line {i}\n" for i in range(7))


def test_a_resumed_publisher_clears_an_earlier_drivers_parts_before_its_own(tmp_path, monkeypatch):
    """A part of an earlier driver at the offset where this one's journal continues would be
    spliced in by a reader: the new publisher's first whole push deletes every earlier part."""
    writer, reader = stores(tmp_path, monkeypatch)
    bucket = tmp_path / "bucket"
    append(writer, "asked 0")
    writer.push(KEY)
    ours = "asked 0\nasked 1\ntold 1\nasked 2\n"
    stale = bucket / part_key(KEY, len(ours))  # another driver's line, where this one's journal will end
    stale.parent.mkdir(parents=True)
    stale.write_text("told 0 by a driver whose journal this is not\n")
    publish = JournalPublisher(writer, KEY)
    for line in ("asked 1", "told 1", "asked 2"):
        append(writer, line)
        publish()
    rebuilt = fetch_journal(reader, KEY)
    assert rebuilt is not None and rebuilt.read_text() == ours


def test_a_fetch_that_fails_halfway_leaves_the_nodes_journal_as_it_was(tmp_path, monkeypatch):
    writer, reader = stores(tmp_path, monkeypatch)
    publish = JournalPublisher(writer, KEY)
    for i in range(3):
        append(writer, f"line {i}")
        publish()
    assert (tmp_path / "bucket" / part_key(KEY, 14)).exists()  # the whole journal holds 2 lines, a part the third
    def broken(key: str) -> dict[str, bytes]:  # the whole journal came; reading its parts fails
        raise OSError("throttled")

    monkeypatch.setattr(reader, "read_files", broken)
    with pytest.raises(OSError, match="throttled"):
        fetch_journal(reader, KEY)
    assert not reader.path(KEY).exists()  # not a journal of 2 lines taken for the study of 3
    append(reader, "the node's own, older")
    with pytest.raises(OSError, match="throttled"):
        fetch_journal(reader, KEY)
    assert reader.path(KEY).read_text() == "the node's own, older\n"


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


def test_on_s3_the_parts_are_listed_read_and_deleted_like_a_folders_files(s3, tmp_path):
    """moto's S3 server on 127.0.0.1: a prefix of parts is no folder there until listed."""
    writer = WorkStore.open(f"{s3}/team")
    reader = WorkStore(writer.location, tmp_path / "other-node", writer.remote)
    publish = JournalPublisher(writer, KEY)
    for i in range(6):  # whole at 1, 2 and 4 lines; lines 3, 5 and 6 as parts (line 3's deleted at 4)
        append(writer, f"line {i}")
        publish()
    assert sorted(reader.read_files(f"{KEY}.parts")) == [Path(part_key(KEY, 4 * 7)).name, Path(part_key(KEY, 5 * 7)).name]
    rebuilt = fetch_journal(reader, KEY)
    assert rebuilt is not None and rebuilt.read_text() == "".join(f"line {i}\n" for i in range(6))


def test_a_location_without_the_journal_keeps_the_nodes_own_and_a_cut_last_line_is_dropped(tmp_path, monkeypatch):
    writer, reader = stores(tmp_path, monkeypatch)
    append(reader, "asked 0")  # every publish of this node failed: the location never got it
    kept = fetch_journal(reader, KEY)
    assert kept is not None and kept.read_text() == "asked 0\n"
    append(writer, "asked 0")
    writer.push(KEY)
    (tmp_path / "bucket" / KEY).write_bytes(b'asked 0\n{"op_code": 4, "trial_id"')  # a push killed midway
    rebuilt = fetch_journal(reader, KEY)
    assert rebuilt is not None and rebuilt.read_text() == "asked 0\n"
