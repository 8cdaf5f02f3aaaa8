"""The data fingerprint follows what decides the tokenized splits, and nothing else."""

from __future__ import annotations

import os

from pipeline.prepare import fingerprint
from tests.unit.prepare.task_files import (
    glue_cfg,
    write_glue_task,
)


def test_fingerprint_follows_file_contents_not_size_or_mtime(tmp_path, tiny_tokenizer):
    folder = write_glue_task(tmp_path, "rte")
    cfg = glue_cfg("rte", tmp_path)
    before = fingerprint.data_fingerprint(cfg, tiny_tokenizer)
    train = folder / "train.tsv"
    stat = train.stat()
    train.write_text(train.read_text().replace("\tentailment", "\tentailmenT"))  # same size
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert train.stat().st_size == stat.st_size and train.stat().st_mtime_ns == stat.st_mtime_ns
    assert fingerprint.data_fingerprint(cfg, tiny_tokenizer) != before


def test_fingerprint_follows_tokenizer_and_settings(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "rte")
    cfg = glue_cfg("rte", tmp_path)
    base = fingerprint.data_fingerprint(cfg, tiny_tokenizer)
    tiny_tokenizer("uses the tokenizer once", truncation=True, max_length=3)  # mutates backend truncation state
    assert fingerprint.data_fingerprint(cfg, tiny_tokenizer) == base
    for change in ({"max_seq_length": 64}, {"max_train_samples": 5}, {"sample_seed": 3}):
        assert fingerprint.data_fingerprint(cfg.model_copy(update=change), tiny_tokenizer) != base
    from pipeline.prepare.text_tokenizer import train_wordpiece

    assert fingerprint.data_fingerprint(cfg, train_wordpiece(["other words entirely"], vocab_size=40)) != base
