"""The work location (`pipeline.storage`): a folder works as before; a URI (file://, s3:// on a
local S3-compatible server) is the place of record and each node works in its own mirror."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from pipeline.errors import DrydockError
from pipeline.storage import WorkStore


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_folder_is_its_own_place_of_record(tmp_path):
    store = WorkStore.open(tmp_path / "runs")
    assert not store.is_remote and store.local == (tmp_path / "runs").resolve()
    store.check_writable()
    assert store.fetch("cache/x") is None  # nothing there, nothing fetched
    (store.local / "cache" / "x").mkdir(parents=True)
    assert store.fetch("cache/x") == store.local / "cache" / "x"
    store.push("cache/x")  # a no-op: there is nowhere else
    # a student's path as an outcome gives it today (absolute) is this node's path
    assert store.localize(str(store.local / "a" / "student")) == store.local / "a" / "student"
    assert store.uri("a/student") == str(store.local / "a" / "student")


def test_a_file_uri_is_mirrored_per_node_and_read_back_whole(tmp_path, monkeypatch):
    root = tmp_path / "bucket"
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node-a"))
    a = WorkStore.open(root.as_uri())
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node-b"))
    b = WorkStore.open(root.as_uri() + "/")  # the same location, however it is written
    assert a.remote == b.remote == root.as_uri()
    assert a.local.parent == tmp_path / "node-a" / "work" and b.local.parent == tmp_path / "node-b" / "work"
    assert a.local.name == b.local.name and a.local.name.startswith("bucket-")
    a.check_writable()
    assert [p.name for p in root.iterdir()] == []  # the probe is removed

    student = a.path("s/runs/r/trials/t1/student")
    student.mkdir(parents=True)
    (student / "config.json").write_text('{"a": 1}')
    (student / "sub").mkdir()
    (student / "sub" / "w.bin").write_bytes(b"\x00\x01" * 1000)
    (a.path("s/runs/r/trials/t1") / "outcome.json").write_text(json.dumps({"status": "finished"}))
    a.push_last("s/runs/r/trials/t1", "outcome.json")
    assert {k: v for k, v in _tree(root / "s/runs/r/trials/t1").items() if not k.endswith(".drydock-complete")} == \
        _tree(a.path("s/runs/r/trials/t1"))

    # node B reads it through the store, never through A's folder
    got = b.localize(a.uri("s/runs/r/trials/t1/student"))
    assert got == b.path("s/runs/r/trials/t1/student") and _tree(got) == _tree(student)
    assert not any(p.name.startswith(".") for p in got.parent.iterdir())  # no scratch folder left
    assert b.exists("s/runs/r/trials/t1/outcome.json") and not b.exists("s/runs/r/trials/t2")
    assert b.fetch("s/runs/r/trials/t2/outcome.json", fresh=True) is None

    # the store's completion mark stays in the store
    assert ".drydock-complete" in _tree(root / "s/runs/r/trials/t1/student") and ".drydock-complete" not in _tree(got)
    # an immutable folder is not fetched again; a mutable file fetched `fresh` is
    (root / "s/runs/r/trials/t1/student/config.json").write_text('{"a": 2}')
    assert (b.fetch("s/runs/r/trials/t1/student") / "config.json").read_text() == '{"a": 1}'
    (root / "s/runs/r/trials/t1/outcome.json").write_text('{"status": "failed"}')
    assert b.fetch("s/runs/r/trials/t1/outcome.json", fresh=True).read_text() == '{"status": "failed"}'
    # a file the store no longer has is not kept as if it were current
    (root / "s/runs/r/trials/t1/outcome.json").unlink()
    assert b.fetch("s/runs/r/trials/t1/outcome.json", fresh=True) is None
    assert not b.path("s/runs/r/trials/t1/outcome.json").exists()


def test_an_s3_uri_round_trips_through_a_local_s3_server(s3, tmp_path):
    store = WorkStore.open(f"{s3}/team/sweeps")
    store.check_writable()
    folder = store.path("cache/data-abc")
    folder.mkdir(parents=True)
    (folder / "train.arrow").write_bytes(b"rows" * 100)
    store.push("cache/data-abc")
    fs, _ = pafs.FileSystem.from_uri(s3)
    listed = [i.path for i in fs.get_file_info(pafs.FileSelector("drydock-test/team/sweeps", recursive=True)) if i.is_file]
    assert listed == ["drydock-test/team/sweeps/cache/data-abc/.drydock-complete", "drydock-test/team/sweeps/cache/data-abc/train.arrow"]
    elsewhere = WorkStore(store.location, tmp_path / "other-node", store.remote)
    assert _tree(elsewhere.fetch("cache/data-abc")) == {"train.arrow": b"rows" * 100}


def test_a_location_that_cannot_be_used_fails_naming_workdir(s3):
    with pytest.raises(DrydockError, match=r"--workdir: cannot write to s3://no-such-bucket"):
        WorkStore.open("s3://no-such-bucket/x").check_writable()
    with pytest.raises(DrydockError, match=r"--workdir: cannot open nosuchscheme://x"):
        WorkStore.open("nosuchscheme://x/y")


def test_a_folder_whose_push_did_not_finish_is_not_there(tmp_path, monkeypatch):
    """A push cut short (a killed driver, a lost node) leaves the first files of a folder in the
    store: no reader may take them for the whole folder, and a later push completes it."""
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node"))
    root = tmp_path / "bucket"
    store = WorkStore.open(root.as_uri())
    (root / "teachers" / "k").mkdir(parents=True)
    (root / "teachers" / "k" / "config.json").write_text("{}")  # what a cut-short push left
    assert not store.exists("teachers/k") and store.fetch("teachers/k") is None
    assert not store.path("teachers/k").exists()
    teacher = store.path("teachers/k")
    teacher.mkdir(parents=True)
    (teacher / "config.json").write_text("{}")
    (teacher / "model.safetensors").write_bytes(b"w" * 10)
    store.push("teachers/k")
    assert store.exists("teachers/k")
    other = WorkStore(store.location, tmp_path / "other", store.remote)
    assert _tree(other.fetch("teachers/k")) == {"config.json": b"{}", "model.safetensors": b"w" * 10}
    store.delete("teachers/k")
    assert not store.exists("teachers/k") and not (root / "teachers" / "k").exists() and not teacher.exists()



def test_a_path_is_addressed_by_the_store_only_when_the_store_is_a_uri(tmp_path, monkeypatch):
    folder = WorkStore.open(tmp_path / "runs")
    student = folder.local / "s" / "runs" / "r1" / "trials" / "t0" / "student"
    assert folder.address(student) == str(student)  # a folder is its own place of record
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node"))
    uri = WorkStore.open((tmp_path / "bucket").as_uri())
    mirrored = uri.path("s/runs/r1/trials/t0/student")
    assert uri.address(mirrored) == f"{uri.remote}/s/runs/r1/trials/t0/student"  # what another node opens
    assert uri.address(str(mirrored)) == uri.address(mirrored)
    outside = tmp_path / "elsewhere" / "teacher"
    assert uri.address(outside) == str(outside)  # not in the store: only this node's path names it


def test_a_work_directory_that_exists_but_takes_no_files_is_refused_before_any_work():
    """mkdir of an existing folder succeeds whatever its permissions: the sweep found out 34 s in,
    at its first write. /proc exists and takes no new file, even from root (the suite's user
    here, whom chmod would not stop)."""
    from pipeline.errors import DrydockError
    from pipeline.storage import WorkStore

    with pytest.raises(DrydockError, match=r"^--workdir: cannot write to /proc: "):
        WorkStore.open("/proc").check_writable()


def test_the_storage_and_the_spec_checks_agree_on_which_uris_name_a_bucket():
    from pipeline import config, storage

    assert storage.OBJECT_STORE_SCHEMES == config.OBJECT_STORE_SCHEMES
    assert config.OBJECT_STORE_SCHEMES - {"az"} <= config.RAY_STORAGE_SCHEMES  # az:// is fsspec's alone


def test_a_fresh_fetch_keeps_what_this_node_wrote_since_its_last_push_unless_another_wrote_the_store(tmp_path, monkeypatch):
    """mlflow.db and the results table reach the store on a schedule (`PushSchedule`): a driver
    killed between two pushes leaves its node's copy ahead of the store's, and the resumed run on
    the same node fetched the older one over it (losing runs' metric histories). The store's copy
    wins only when another node pushed after this one."""
    import os

    root = tmp_path / "bucket"
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node-a"))
    a = WorkStore.open(root.as_uri())
    a.check_writable()
    a.path("mlflow.db").write_bytes(b"runs 1-5")
    a.push("mlflow.db")
    a.path("mlflow.db").write_bytes(b"runs 1-6")  # written after the last push, then the driver died
    assert a.fetch("mlflow.db", fresh=True).read_bytes() == b"runs 1-6"

    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node-b"))
    b = WorkStore.open(root.as_uri())
    assert b.fetch("mlflow.db", fresh=True).read_bytes() == b"runs 1-5"  # node B has only the store's
    b.path("mlflow.db").write_bytes(b"runs 1-5, 9")
    b.push("mlflow.db")  # node B resumed and pushed since
    stamp = (root / "mlflow.db").stat().st_mtime_ns
    os.utime(root / "mlflow.db", ns=(stamp + 10**9, stamp + 10**9))  # a later second than A's push, however fast this ran
    assert a.fetch("mlflow.db", fresh=True).read_bytes() == b"runs 1-5, 9"


def test_the_store_opens_its_filesystem_once_and_again_when_the_aws_settings_change(s3, tmp_path, monkeypatch):
    """Opening an S3 filesystem builds an AWS client and resolves the bucket's region (a request):
    a sweep's driver fetches and pushes a few files per trial, and opening anew for each was
    about a third of its store work in a profile (benchmarks/RESULTS.md). One per URI and AWS
    settings; a changed endpoint (another server) opens anew rather than talking to the old one."""
    import types

    import pipeline.storage

    opened: list[str] = []

    class CountingArrow(types.ModuleType):  # pyarrow.fs, its opening of a URI counted (its classes cannot be patched)
        def __getattr__(self, name):
            return getattr(pafs, name)

    counting = CountingArrow("pyarrow.fs")
    counting.FileSystem = types.SimpleNamespace(from_uri=lambda uri: (opened.append(uri), pafs.FileSystem.from_uri(uri))[1])
    monkeypatch.setattr(pipeline.storage, "pafs", counting)
    store = WorkStore.open(f"{s3}/scale")
    for i in range(3):
        store.path(f"f{i}.txt").parent.mkdir(parents=True, exist_ok=True)
        store.path(f"f{i}.txt").write_text(str(i))
        store.push(f"f{i}.txt")
        assert store.fetch(f"f{i}.txt", fresh=True).read_text() == str(i)
    assert opened == [f"{s3}/scale"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(OSError):
        store.push("f0.txt")
    assert opened == [f"{s3}/scale"] * 2


def test_read_files_lists_a_store_folder_once_and_reads_each_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node"))
    (tmp_path / "bucket" / "run" / "parts").mkdir(parents=True)
    for name, text in (("002", "b"), ("001", "a")):
        (tmp_path / "bucket" / "run" / "parts" / name).write_text(text)
    (tmp_path / "bucket" / "run" / "parts" / "deeper").mkdir()  # a folder inside is not a file of it
    store = WorkStore.open((tmp_path / "bucket").as_uri())
    assert store.read_files("run/parts") == {"001": b"a", "002": b"b"}
    assert store.read_files("run/absent") == {}
    assert not store.path("run/parts").exists()  # read, not copied into this node's folder
    local = WorkStore.open(tmp_path / "bucket")
    assert local.read_files("run/parts") == {"001": b"a", "002": b"b"} and local.read_files("run/absent") == {}
