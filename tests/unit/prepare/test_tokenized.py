"""The tokenized cache: subsampled and tokenized once without padding, reused without retokenizing,
built whole or not at all; label-free text for distillation cached the same way."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from pipeline.errors import DataError
from pipeline.prepare import tokenized
from pipeline.prepare.tasks import GLUE
from pipeline.prepare.tokenized import prepare_data, prepare_unlabeled
from tests.unit.prepare.task_files import (
    GOOD,
    files_task,
    glue_cfg,
    jsonl,
    many_rte_rows,
    write_glue_task,
)


def test_prepare_data_subsamples_identically_across_runs(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "rte", many_rte_rows(60))
    cfg = glue_cfg("rte", tmp_path, max_train_samples=12, max_eval_samples=4)
    first = prepare_data(cfg, tiny_tokenizer, tmp_path / "cache-a")
    second = prepare_data(cfg, tiny_tokenizer, tmp_path / "cache-b")
    other = prepare_data(cfg.model_copy(update={"sample_seed": 7}), tiny_tokenizer, tmp_path / "cache-c")
    assert (first.num_train, len(first.dev["dev"])) == (12, 4)
    assert first.train["input_ids"][:] == second.train["input_ids"][:]
    assert first.train["input_ids"][:] != other.train["input_ids"][:]


def test_prepare_data_tokenizes_without_padding(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "mnli")
    prepared = prepare_data(glue_cfg("mnli", tmp_path), tiny_tokenizer, tmp_path / "cache")
    assert prepared.task is GLUE["mnli"]
    assert set(prepared.dev) == {"dev", "dev_mismatched"}
    assert prepared.train.column_names == ["input_ids", "attention_mask", "token_type_ids", "labels"]
    lengths = [len(ids) for ids in prepared.train["input_ids"][:]]
    assert len(set(lengths)) == 2 and max(lengths) > 8  # each row its own length: no padding
    assert all(set(mask) == {1} for mask in prepared.train["attention_mask"][:])
    assert all(1 in types for types in prepared.train["token_type_ids"][:])  # pairs use segment B
    assert prepared.train["labels"][:] == [1, 0]
    truncated = prepare_data(glue_cfg("mnli", tmp_path, max_seq_length=8), tiny_tokenizer, tmp_path / "cache")
    assert [len(ids) for ids in truncated.train["input_ids"][:]] == [8, 8]


def test_regression_labels_are_float32(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "stsb")
    prepared = prepare_data(glue_cfg("stsb", tmp_path), tiny_tokenizer, tmp_path / "cache")
    assert prepared.train.features["labels"].dtype == "float32"
    assert prepared.train["labels"][:] == pytest.approx([5.0, 3.8])


def test_cache_is_reused_without_retokenizing(tmp_path, tiny_tokenizer, monkeypatch):
    write_glue_task(tmp_path, "rte")
    cfg, cache = glue_cfg("rte", tmp_path), tmp_path / "cache"
    first = prepare_data(cfg, tiny_tokenizer, cache)
    assert [p.name for p in cache.iterdir()] == [f"data-{first.fingerprint}"]  # no temp folder left

    def no_map(*args, **kwargs):
        raise AssertionError("the cached data was tokenized again")

    monkeypatch.setattr(datasets.Dataset, "map", no_map)
    second = prepare_data(cfg, tiny_tokenizer, cache)
    assert second.fingerprint == first.fingerprint
    assert second.train["input_ids"][:] == first.train["input_ids"][:]
    assert [p.name for p in cache.iterdir()] == [f"data-{first.fingerprint}"]


def test_concurrent_writer_wins_the_rename(tmp_path):
    def build_while_another_process_finishes(scratch: Path) -> None:
        (scratch / "mine").write_text("x")
        (tmp_path / "data-abc").mkdir()
        (tmp_path / "data-abc" / "theirs").write_text("y")

    folder = tokenized._cached(tmp_path, "data-abc", build_while_another_process_finishes)
    assert [p.name for p in folder.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == ["data-abc"]  # our scratch copy is gone


def test_prepare_unlabeled_adds_extra_text_and_drops_labels(tmp_path, tiny_tokenizer, monkeypatch):
    write_glue_task(tmp_path, "rte", many_rte_rows(30))
    extra = tmp_path / "extra.txt"
    extra.write_text("first extra line\n\n  second extra line  \n")
    cfg = glue_cfg("rte", tmp_path, max_train_samples=3)  # does not apply to unlabeled text
    unlabeled = prepare_unlabeled(cfg, tiny_tokenizer, tmp_path / "cache", max_samples=10, files=[str(extra)])
    assert unlabeled.column_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert len(unlabeled) == 10 + 2
    assert tiny_tokenizer.decode(unlabeled["input_ids"][-1], skip_special_tokens=True) == tiny_tokenizer.decode(
        tiny_tokenizer("second extra line")["input_ids"], skip_special_tokens=True
    )
    monkeypatch.setattr(datasets.Dataset, "map", lambda *a, **k: pytest.fail("re-tokenized"))
    again = prepare_unlabeled(cfg, tiny_tokenizer, tmp_path / "cache", max_samples=10, files=[str(extra)])
    assert again["input_ids"][:] == unlabeled["input_ids"][:]


def test_prepare_unlabeled_missing_extra_file(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "rte")
    with pytest.raises(DataError, match=r"missing\.txt: file not found"):
        prepare_unlabeled(glue_cfg("rte", tmp_path), tiny_tokenizer, tmp_path / "cache", None, [str(tmp_path / "missing.txt")])


def test_an_extra_unlabeled_file_that_is_not_utf8_names_its_line(tmp_path, tiny_tokenizer):
    extra = tmp_path / "extra.txt"
    extra.write_bytes(b"first line\nsecond line\nthird \xff line\n")
    train = jsonl(tmp_path / "train.jsonl", GOOD)
    with pytest.raises(DataError) as info:
        prepare_unlabeled(files_task(tmp_path, train), tiny_tokenizer, tmp_path / "cache", None, [str(extra)])
    assert info.value.problems == [f"{extra}: line 3: byte 29 (0xff) is not UTF-8; save the file as UTF-8"]
