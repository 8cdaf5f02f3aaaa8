"""Batches for training: dynamic padding, seeded per-epoch shuffling sharded by rank (optionally
grouped by length), and a stream of micro-batches that knows where it is, so a resumed trial
continues at the batch it stopped at."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from pipeline.prepare.padding import pad_batch, row_lengths
from pipeline.training.engine import Distributed


def collate(features: list[dict[str, Any]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """A training batch: the rows padded as every runtime pads them
    (`pipeline.prepare.padding.pad_batch`), as tensors, with their labels (float32 for a
    regression task's scores, else class indices)."""
    batch = {name: torch.from_numpy(values) for name, values in pad_batch(features, pad_id).items()}
    if "labels" in features[0]:
        labels = [f["labels"] for f in features]
        dtype = torch.float32 if isinstance(labels[0], float) else torch.long
        batch["labels"] = torch.tensor(labels, dtype=dtype)
    return batch


# Rows sorted together when grouping by length: this many groups' worth (Hugging Face's
# LengthGroupedSampler uses 50 batches a "megabatch"). Larger: each group is drawn from more rows,
# so its lengths are closer, and which rows share a batch is decided more by length, less by chance.
GROUPS_PER_SORT = 50


class EpochSampler(Sampler[int]):
    """Seeded shuffling per epoch, sharded by rank, resumable mid-epoch.

    Every rank draws the same permutation (seed + epoch) and takes its stride of it, which is
    what DistributedSampler does; unlike it, `skip` lets a resumed trial continue at the batch it
    stopped at instead of replaying the epoch from its start.

    With `lengths`, the permutation is grouped by length the way Hugging Face's
    `group_by_length` does it: each slice of GROUPS_PER_SORT × `chunk` shuffled rows is sorted by
    length and cut into groups of `chunk` (a micro-batch of every rank: its size × the world
    size, so the k-th micro-batch of every rank comes from group k). Unlike Hugging Face's, the
    groups are then shuffled across the epoch, so batches do not run longest to shortest within
    each slice. Dynamic padding then pads a micro-batch to about its own rows' length, not to the
    longest of random rows: on SST-2's training sentences (mean 13 tokens), random batches of 32
    pad to 40 on average, grouped ones to 14 (benchmarks/RESULTS.md, "Grouping by length").
    """

    def __init__(self, size: int, seed: int, rank: int = 0, world_size: int = 1,
                 lengths: Sequence[int] | None = None, chunk: int = 1):
        if lengths is not None and len(lengths) != size:
            raise ValueError(f"lengths has {len(lengths)} entries for {size} rows")
        self.size, self.seed, self.rank, self.world_size = size, seed, rank, world_size
        self.lengths, self.chunk = lengths, max(1, chunk)
        self.epoch, self.skip = 0, 0

    def indices(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.size, generator=g).tolist()
        if self.lengths is not None:
            order = _grouped(order, self.lengths, self.chunk, g)
        per_rank = math.ceil(self.size / self.world_size)
        order += order[: per_rank * self.world_size - self.size]  # pad so every rank gets as many
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices()[self.skip :])

    def __len__(self) -> int:
        return math.ceil(self.size / self.world_size) - self.skip


def _grouped(order: list[int], lengths: Sequence[int], chunk: int, g: torch.Generator) -> list[int]:
    """`order` sorted by length (longest first) within each slice of GROUPS_PER_SORT groups, cut
    into groups of `chunk`, the full groups shuffled with `g` and the short remainder kept last
    (so every later group stays aligned to the ranks' micro-batches)."""
    span = GROUPS_PER_SORT * chunk
    ranked: list[int] = []
    for start in range(0, len(order), span):
        ranked += sorted(order[start:start + span], key=lambda i: -lengths[i])  # stable: ties keep the shuffle
    full = len(ranked) // chunk
    groups = [ranked[k * chunk:(k + 1) * chunk] for k in range(full)]
    shuffled = [j for k in torch.randperm(full, generator=g).tolist() for j in groups[k]]
    return shuffled + ranked[full * chunk:]


class BatchStream:
    """An endless stream of micro-batches over epochs; knows where it is for checkpoints."""

    def __init__(self, dataset, micro_batch: int, seed: int, dist: Distributed, pad_id: int, group_by_length: bool = False):
        lengths = row_lengths(dataset) if group_by_length else None
        self.sampler = EpochSampler(len(dataset), seed, dist.rank, dist.world_size, lengths, micro_batch * dist.world_size)
        self.loader = DataLoader(
            dataset, batch_size=micro_batch, sampler=self.sampler, collate_fn=lambda f: collate(f, pad_id), drop_last=False,
            generator=torch.Generator(),  # its own: a new iterator must not draw from the global RNG
        )
        self.micro_batch = micro_batch
        self.consumed = 0  # micro-batches taken in the current epoch
        self._it: Iterator | None = None

    def next(self) -> dict[str, torch.Tensor]:
        if self._it is None:
            self._it = iter(self.loader)
        try:
            batch = next(self._it)
        except StopIteration:
            self.sampler.epoch += 1
            self.sampler.skip = 0
            self.consumed = 0
            self._it = iter(self.loader)
            batch = next(self._it)
        self.consumed += 1
        return batch

    def state(self) -> dict[str, int]:
        return {"epoch": self.sampler.epoch, "consumed": self.consumed}

    def restore(self, state: Mapping[str, int]) -> None:
        self.sampler.epoch = int(state["epoch"])
        self.sampler.skip = int(state["consumed"]) * self.micro_batch
        self.consumed = int(state["consumed"])
        self._it = None
