"""Tokenized rows padded into a batch: the one padding both the training loop and the runtimes use.

The prepared splits are truncated but never padded (`pipeline.prepare.tokenized`): each batch is
padded to its own longest row, so short GLUE sentences pay for their own length, not for
max_seq_length, and an exported runtime sees the shapes it will see in serving. numpy, not torch:
the ONNX Runtime variants take arrays, and training wraps them as tensors without a copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def pad_batch(rows: Sequence[Mapping[str, Any]], pad_id: int = 0) -> dict[str, np.ndarray]:
    """int64 `input_ids`, `attention_mask` and `token_type_ids` of `rows`, padded with `pad_id`
    (mask and segment 0) to the longest row; a row without `token_type_ids` is all segment A."""
    length = max(len(row["input_ids"]) for row in rows)
    n = len(rows)
    input_ids = np.full((n, length), pad_id, dtype=np.int64)
    attention_mask = np.zeros((n, length), dtype=np.int64)
    token_type_ids = np.zeros((n, length), dtype=np.int64)
    for i, row in enumerate(rows):
        k = len(row["input_ids"])
        input_ids[i, :k] = row["input_ids"]
        attention_mask[i, :k] = 1
        if row.get("token_type_ids") is not None:
            token_type_ids[i, :k] = row["token_type_ids"]
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def row_lengths(rows: Any) -> list[int]:
    """Every row's token count: of a list of rows, or of a tokenized `datasets.Dataset`, from its
    Arrow column (shuffled or selected rows included) without decoding a row into Python."""
    if not is_dataset(rows):
        return [len(row["input_ids"]) for row in rows]
    import pyarrow.compute as pc

    return pc.list_value_length(rows.with_format("arrow")["input_ids"]).to_pylist()


def is_dataset(rows: Any) -> bool:
    """A `datasets.Dataset` (read by column, through Arrow) rather than a sequence of row mappings."""
    return hasattr(rows, "with_format")


def length_batches(rows: Any, batch_size: int) -> tuple[list[list[int]], np.ndarray]:
    """Batches of row positions taken by length (each pads to about its own rows' length), and
    the positions that put their concatenated outputs back in the rows' order
    (`outputs[back]`). Scoring only: the metrics do not depend on the order."""
    order = np.argsort(np.asarray(row_lengths(rows)), kind="stable")
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return [order[start:start + batch_size].tolist() for start in range(0, len(order), batch_size)], back
