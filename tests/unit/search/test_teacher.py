"""Where the sweep's teacher is published for the Train workers: its own path on a folder, a key
of the store (the cache's, or one named by content for a given teacher) on a URI."""

from __future__ import annotations

from pathlib import Path

from pipeline.prepare.cache import folder_digest
from pipeline.search.teacher import publish_teacher
from pipeline.storage import WorkStore
from pipeline.training.teacher import TeacherResult


def teacher_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"layers": 2}')
    return folder


def test_on_a_folder_the_workers_read_the_teachers_own_path(tmp_path):
    store = WorkStore.open(tmp_path / "runs")
    teacher = TeacherResult(path=teacher_folder(tmp_path / "runs" / "teachers" / "k1"), metrics={}, reused=True, key="k1")
    assert publish_teacher(store, teacher) == str(teacher.path)


def test_on_a_uri_the_cached_teacher_is_pushed_under_its_key_and_a_given_one_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "node"))
    store = WorkStore.open((tmp_path / "bucket").as_uri())
    cached = TeacherResult(path=teacher_folder(store.path("teachers/k1")), metrics={}, reused=False, key="k1")
    assert publish_teacher(store, cached) == "teachers/k1" and store.exists("teachers/k1")
    given = TeacherResult(path=teacher_folder(tmp_path / "my-teacher"), metrics={}, reused=True, key="given")
    key = f"teachers/given-{folder_digest(given.path)}"
    assert publish_teacher(store, given) == key and store.exists(key)
    assert (store.path(key) / "config.json").read_text() == '{"layers": 2}'
