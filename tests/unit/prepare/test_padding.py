"""Tokenized rows padded into a batch: to the longest row, with the pad id, masked, segment A by default."""

from __future__ import annotations

import numpy as np

from pipeline.prepare.padding import pad_batch


def test_rows_are_padded_to_the_longest_with_the_pad_id_and_masked():
    batch = pad_batch([{"input_ids": [101, 7, 102]}, {"input_ids": [101, 102], "token_type_ids": [0, 1]}], pad_id=9)
    assert batch["input_ids"].tolist() == [[101, 7, 102], [101, 102, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0], [0, 1, 0]]
    assert {array.dtype for array in batch.values()} == {np.dtype(np.int64)}


def test_a_batch_is_as_long_as_its_own_longest_row():
    assert pad_batch([{"input_ids": [1]}, {"input_ids": [2]}])["input_ids"].shape == (2, 1)
