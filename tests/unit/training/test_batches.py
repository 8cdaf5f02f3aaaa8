"""Training batches: dynamic padding (the one padding the runtimes use too), seeded per-epoch
shuffling sharded by rank, and how many steps a run takes."""

from __future__ import annotations

import torch

from pipeline.prepare.padding import pad_batch
from pipeline.training import batches


def test_the_epoch_sampler_covers_every_example_once_per_epoch():
    ranks = [batches.EpochSampler(10, seed=3, rank=r, world_size=2).indices() for r in (0, 1)]
    assert sorted(ranks[0] + ranks[1]) == list(range(10))
    s = batches.EpochSampler(10, seed=3)
    first = s.indices()
    s.epoch = 1
    assert s.indices() != first and sorted(s.indices()) == list(range(10))


def test_collate_pads_dynamically():
    batch = batches.collate([{"input_ids": [1, 2, 3], "token_type_ids": [0, 0, 1], "labels": 1}, {"input_ids": [4], "labels": 0}])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 1], [0, 0, 0]]
    assert batch["labels"].dtype == torch.long


def test_collate_pads_as_the_runtimes_pad_and_keeps_the_label_type():
    rows = [{"input_ids": [5, 6], "token_type_ids": None, "labels": 2.5}, {"input_ids": [7, 8, 9], "token_type_ids": [0, 1, 1], "labels": 0.5}]
    batch = batches.collate(rows, pad_id=3)
    assert batch["input_ids"].tolist() == [[5, 6, 3], [7, 8, 9]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0], [0, 1, 1]]
    assert {name: batch[name].dtype for name in ("input_ids", "attention_mask", "token_type_ids")} == dict.fromkeys(
        ("input_ids", "attention_mask", "token_type_ids"), torch.long)
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [2.5, 0.5]
    arrays = pad_batch(rows, pad_id=3)
    assert all(batch[name].tolist() == arrays[name].tolist() for name in arrays)
