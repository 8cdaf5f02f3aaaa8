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


def test_without_lengths_the_order_is_the_plain_seeded_permutation():
    # the order every trial before group_by_length trained in: a spec that leaves it off keeps it
    assert batches.EpochSampler(20, seed=3).indices() == [3, 5, 2, 15, 10, 1, 12, 11, 17, 13, 19, 7, 6, 14, 16, 4, 0, 18, 8, 9]
    assert batches.EpochSampler(20, seed=3, rank=1, world_size=2).indices() == [5, 15, 1, 11, 13, 7, 14, 4, 18, 9]


def _lengths(n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 65, (n,), generator=g).tolist()


def _padded(order: list[int], lengths: list[int], batch: int) -> int:
    """Tokens a run computes over `order` in micro-batches of `batch`: each padded to its longest."""
    return sum(len(order[i:i + batch]) * max(lengths[j] for j in order[i:i + batch]) for i in range(0, len(order), batch))


def test_grouped_by_length_a_micro_batch_holds_rows_of_similar_length_and_the_epoch_every_row_once():
    lengths = _lengths(1000)
    plain = batches.EpochSampler(1000, seed=1).indices()
    grouped = batches.EpochSampler(1000, seed=1, lengths=lengths, chunk=8).indices()
    assert sorted(grouped) == list(range(1000))
    # random micro-batches of 8 from lengths 1-64 pad to ~58 on average (1.78x the rows' own
    # tokens); grouped ones to about their own
    assert _padded(grouped, lengths, 8) < 1.1 * sum(lengths)
    assert _padded(plain, lengths, 8) > 1.6 * sum(lengths)
    # the batches come in a seeded random order, not longest first: no ramp within an epoch
    longest = [max(lengths[j] for j in grouped[i:i + 8]) for i in range(0, 1000, 8)]
    assert longest != sorted(longest, reverse=True) and longest != sorted(longest)
    again = batches.EpochSampler(1000, seed=1, lengths=lengths, chunk=8)
    assert again.indices() == grouped
    again.epoch = 1
    assert again.indices() != grouped and sorted(again.indices()) == list(range(1000))


def test_grouped_ranks_take_their_micro_batches_from_the_same_group_and_resume_where_they_stopped():
    lengths = _lengths(999, seed=2)
    ranks = [batches.EpochSampler(999, seed=4, rank=r, world_size=3, lengths=lengths, chunk=4 * 3) for r in range(3)]
    orders = [s.indices() for s in ranks]
    assert sorted(orders[0] + orders[1] + orders[2]) == list(range(999))
    # micro-batch k of every rank is one group of 12 rows of similar length, split three ways
    for k in range(0, 333 - 4, 4):
        rows = [j for order in orders for j in order[k:k + 4]]
        assert max(lengths[j] for j in rows) - min(lengths[j] for j in rows) <= 8
    ranks[1].skip = 20
    assert list(iter(ranks[1])) == orders[1][20:]


def test_a_batch_stream_groups_by_length_only_when_asked():
    import datasets

    from pipeline.training.engine import Distributed

    lengths = _lengths(64, seed=5)
    data = datasets.Dataset.from_dict({"input_ids": [[7] * n for n in lengths], "labels": [0] * 64})
    dist = Distributed()
    shapes = {}
    for group in (False, True):
        stream = batches.BatchStream(data, 8, seed=0, dist=dist, pad_id=0, group_by_length=group)
        shapes[group] = sum(b["input_ids"].numel() for b in (stream.next() for _ in range(8)))
    assert shapes[False] == _padded(batches.EpochSampler(64, seed=0).indices(), lengths, 8)
    assert shapes[True] < 1.2 * sum(lengths) < shapes[False]


def test_grouped_streams_of_two_ranks_share_each_step_s_group_and_cover_an_uneven_epoch():
    import datasets

    from pipeline.training.engine import Distributed

    lengths = _lengths(37, seed=6)  # 37 rows, micro-batches of 4 on 2 ranks: groups of 8, a short one last
    data = datasets.Dataset.from_dict({"input_ids": [[i] * n for i, n in enumerate(lengths)], "labels": [0] * 37})
    streams = [batches.BatchStream(data, 4, seed=2, dist=Distributed(strategy="ddp", world_size=2, rank=r), pad_id=0,
                                   group_by_length=True) for r in (0, 1)]
    seen: list[int] = []
    for step in range(5):  # ceil(37 / 2) = 19 rows a rank: 4 + 4 + 4 + 4 + 3
        pair = [s.next() for s in streams]
        rows = [int(b["input_ids"][i, 0]) for b in pair for i in range(b["input_ids"].shape[0])]
        seen += rows
        if step < 4:  # a full group of 8: 37 rows are one sorted slice, so a group is a run of it
            low, high = min(lengths[j] for j in rows), max(lengths[j] for j in rows)
            assert all(j in rows for j in range(37) if low < lengths[j] < high)
    assert set(seen) == set(range(37)) and len(seen) == 38  # one row repeated so the ranks stay even
