"""Caches are verified on read: a manifest of file sizes and sha256, written inside each cache
folder before the rename that publishes it, is checked when the cache is reused. A damaged data or
tokenizer cache is rebuilt (cheap); a damaged teacher is named in a one-line error (a rebuild
would cost a fine-tune). Caches written before manifests existed are still accepted."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import pytest

from pipeline.config import TaskConfig, spec_from_dict
from pipeline.errors import DrydockError
from pipeline.prepare import cache
from pipeline.prepare.tokenized import load_prepared_data, prepare_data, prepare_unlabeled
from pipeline.training import teacher as teacher_module
from pipeline.training.export import save_student
from tests.conftest import make_tiny_bert

TASK = TaskConfig(name="smoke", source="synthetic", synthetic={"num_train": 40, "num_dev": 8})


def arrow_file(folder: Path) -> Path:
    return next(folder.glob("train/*.arrow"))


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def flip_last_byte(path: Path) -> None:
    """Same size, other bytes: only the sha256 sees it."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def no_retokenizing(monkeypatch) -> None:
    monkeypatch.setattr(datasets.Dataset, "map", lambda *a, **k: pytest.fail("re-tokenized"))


# ----------------------------------------------------------------------------------------------
# the manifest itself
# ----------------------------------------------------------------------------------------------


def test_atomic_dir_writes_a_manifest_and_rebuilds_a_damaged_folder(tmp_path, caplog):
    builds = []

    def build(folder: Path) -> None:
        builds.append(folder)
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "weights.bin").write_bytes(b"w" * 1000)
        (folder / "config.json").write_text("{}")

    final = cache.atomic_dir(tmp_path / "tokenizer-k", build)
    manifest = json.loads((final / cache.MANIFEST).read_text())
    assert manifest["files"]["sub/weights.bin"]["size"] == 1000 and set(manifest["files"]) == {"sub/weights.bin", "config.json"}
    assert cache.cache_problem(final, deep=True) is None

    cache.atomic_dir(final, build)
    assert len(builds) == 1  # intact: reused
    truncate(final / "sub" / "weights.bin")
    assert "sub/weights.bin is 500 bytes" in cache.cache_problem(final)
    with caplog.at_level(logging.WARNING):
        cache.atomic_dir(final, build)
    assert len(builds) == 2 and (final / "sub" / "weights.bin").stat().st_size == 1000
    assert f"{final} is damaged" in caplog.text and "rebuilding it" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer-k"]  # nothing left aside


def test_sizes_are_checked_always_and_hashes_only_when_asked(tmp_path):
    final = cache.atomic_dir(tmp_path / "c", lambda f: (f.mkdir(), (f / "a.bin").write_bytes(b"abc" * 100)))
    flip_last_byte(final / "a.bin")
    assert cache.cache_problem(final) is None  # a stat per file: what a Train worker pays
    assert "a.bin does not match its recorded sha256" in cache.cache_problem(final, deep=True)
    (final / "a.bin").unlink()
    assert "a.bin is missing" in cache.cache_problem(final)


def test_a_folder_without_manifest_is_accepted_unless_its_safetensors_is_short(tmp_path, tiny_tokenizer):
    folder = save_student(make_tiny_bert(1), tiny_tokenizer, tmp_path / "legacy", _task_info(), {"role": "teacher"})
    assert not (folder / cache.MANIFEST).exists()
    assert cache.cache_problem(folder, deep=True) is None
    truncate(folder / "model.safetensors", 0.9)
    assert "model.safetensors is" in cache.cache_problem(folder)


# ----------------------------------------------------------------------------------------------
# data caches: rebuilt
# ----------------------------------------------------------------------------------------------


def test_a_truncated_arrow_file_in_the_data_cache_is_rebuilt(tmp_path, tiny_tokenizer, caplog):
    first = prepare_data(TASK, tiny_tokenizer, tmp_path)
    rows = first.train["input_ids"][:]
    folder = tmp_path / f"data-{first.fingerprint}"
    truncate(arrow_file(folder))
    with caplog.at_level(logging.WARNING):
        again = prepare_data(TASK, tiny_tokenizer, tmp_path)
    assert again.train["input_ids"][:] == rows
    assert f"{folder} is damaged" in caplog.text
    assert cache.cache_problem(folder, deep=True) is None


def test_same_size_corruption_of_the_data_cache_is_caught_by_the_hash(tmp_path, tiny_tokenizer):
    first = prepare_data(TASK, tiny_tokenizer, tmp_path)
    labels = first.train["labels"][:]
    folder = tmp_path / f"data-{first.fingerprint}"
    flip_last_byte(arrow_file(folder))
    again = prepare_data(TASK, tiny_tokenizer, tmp_path)
    assert again.train["labels"][:] == labels
    assert cache.cache_problem(folder, deep=True) is None


def test_a_data_cache_from_before_manifests_is_reused_and_rebuilt_only_when_unreadable(tmp_path, tiny_tokenizer, monkeypatch):
    first = prepare_data(TASK, tiny_tokenizer, tmp_path)
    folder = tmp_path / f"data-{first.fingerprint}"
    (folder / cache.MANIFEST).unlink()  # as every cache written before this change
    with monkeypatch.context() as m:
        no_retokenizing(m)
        assert len(prepare_data(TASK, tiny_tokenizer, tmp_path).train) == len(first.train)
    truncate(arrow_file(folder))  # no manifest to tell: reading it does
    assert prepare_data(TASK, tiny_tokenizer, tmp_path).train["input_ids"][:] == first.train["input_ids"][:]
    assert (folder / cache.MANIFEST).is_file()  # rebuilt with one


def test_a_train_worker_names_the_damaged_data_folder(tmp_path, tiny_tokenizer):
    first = prepare_data(TASK, tiny_tokenizer, tmp_path)
    folder = tmp_path / f"data-{first.fingerprint}"
    truncate(arrow_file(folder))
    with pytest.raises(DrydockError, match=f"cache: {folder} is damaged .*train/.*arrow is .* bytes.*delete that folder") as e:
        load_prepared_data(TASK, folder)  # a worker has only the cache: it cannot rebuild
    assert len(e.value.problems) == 1 and "\n" not in str(e.value)


def test_the_unlabeled_cache_is_rebuilt_too(tmp_path, tiny_tokenizer):
    first = prepare_unlabeled(TASK, tiny_tokenizer, tmp_path, max_samples=20, files=[])
    folder = next(tmp_path.glob("unlabeled-*"))
    truncate(next(folder.glob("*.arrow")))
    assert prepare_unlabeled(TASK, tiny_tokenizer, tmp_path, max_samples=20, files=[])["input_ids"][:] == first["input_ids"][:]


# ----------------------------------------------------------------------------------------------
# tokenizer caches: rebuilt
# ----------------------------------------------------------------------------------------------


def offline_tokenizer_spec():
    return spec_from_dict({"name": "demo", "task": TASK.model_dump(),
                           "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 60}}})


def test_a_truncated_trained_tokenizer_is_rebuilt(tmp_path):
    from pipeline.prepare.stage import resolve_tokenizer

    tokenizer, folder = resolve_tokenizer(offline_tokenizer_spec(), tmp_path)
    truncate(folder / "tokenizer.json", 0.3)
    again, same = resolve_tokenizer(offline_tokenizer_spec(), tmp_path)
    assert same == folder and again.get_vocab() == tokenizer.get_vocab()


def test_a_tokenizer_from_before_manifests_is_rebuilt_when_unreadable(tmp_path):
    from pipeline.prepare.stage import resolve_tokenizer

    tokenizer, folder = resolve_tokenizer(offline_tokenizer_spec(), tmp_path)
    (folder / cache.MANIFEST).unlink()
    truncate(folder / "tokenizer.json", 0.3)
    again, _ = resolve_tokenizer(offline_tokenizer_spec(), tmp_path)
    assert again.get_vocab() == tokenizer.get_vocab()


# ----------------------------------------------------------------------------------------------
# teacher caches: named, not silently re-fine-tuned
# ----------------------------------------------------------------------------------------------


def _task_info():
    from methods.base import TaskInfo

    return TaskInfo(name="smoke", num_labels=2, regression=False, label_names=("class_0", "class_1"))


def cached_teacher(workdir: Path, tiny_tokenizer, monkeypatch, *, manifest: bool = True) -> Path:
    monkeypatch.setattr(teacher_module, "teacher_key", lambda spec, prepared: "k1")

    def build(tmp: Path) -> None:
        save_student(make_tiny_bert(1), tiny_tokenizer, tmp, _task_info(), {"role": "teacher"})
        (tmp / "teacher_metrics.json").write_text(json.dumps({"eval/accuracy": 0.9}))

    final = cache.atomic_dir(workdir / "teachers" / "k1", build)
    if not manifest:
        (final / cache.MANIFEST).unlink()
    return final


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "before-manifests"])
def test_a_truncated_teacher_is_named_in_a_one_line_error(tmp_path, tiny_tokenizer, monkeypatch, manifest):
    final = cached_teacher(tmp_path, tiny_tokenizer, monkeypatch, manifest=manifest)
    spec = offline_tokenizer_spec()
    found = teacher_module.existing_teacher(spec, None, tmp_path)
    assert found is not None and found.reused and found.metrics == {"eval/accuracy": 0.9}
    truncate(final / "model.safetensors", 0.8)
    with pytest.raises(DrydockError, match=f"teacher: the fine-tuned teacher in {final} is damaged \\(model.safetensors is") as e:
        teacher_module.existing_teacher(spec, None, tmp_path)
    assert "delete that folder" in str(e.value) and "\n" not in str(e.value)
    assert (final / "teacher_metrics.json").is_file()  # nothing deleted behind the user's back


def test_a_teacher_whose_weights_changed_in_place_is_refused(tmp_path, tiny_tokenizer, monkeypatch):
    final = cached_teacher(tmp_path, tiny_tokenizer, monkeypatch)
    flip_last_byte(final / "model.safetensors")
    with pytest.raises(DrydockError, match="model.safetensors does not match its recorded sha256"):
        teacher_module.existing_teacher(offline_tokenizer_spec(), None, tmp_path)
