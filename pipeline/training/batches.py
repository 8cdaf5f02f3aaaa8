"""Batches for training: dynamic padding, seeded per-epoch shuffling sharded by rank, and a
stream of micro-batches that knows where it is, so a resumed trial continues at the batch it
stopped at."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from pipeline.prepare.padding import pad_batch
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


class EpochSampler(Sampler[int]):
    """Seeded shuffling per epoch, sharded by rank, resumable mid-epoch.

    Every rank draws the same permutation (seed + epoch) and takes its stride of it, which is
    what DistributedSampler does; unlike it, `skip` lets a resumed trial continue at the batch it
    stopped at instead of replaying the epoch from its start.
    """

    def __init__(self, size: int, seed: int, rank: int = 0, world_size: int = 1):
        self.size, self.seed, self.rank, self.world_size = size, seed, rank, world_size
        self.epoch, self.skip = 0, 0

    def indices(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.size, generator=g).tolist()
        per_rank = math.ceil(self.size / self.world_size)
        order += order[: per_rank * self.world_size - self.size]  # pad so every rank gets as many
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices()[self.skip :])

    def __len__(self) -> int:
        return math.ceil(self.size / self.world_size) - self.skip


class BatchStream:
    """An endless stream of micro-batches over epochs; knows where it is for checkpoints."""

    def __init__(self, dataset, micro_batch: int, seed: int, dist: Distributed, pad_id: int):
        self.sampler = EpochSampler(len(dataset), seed, dist.rank, dist.world_size)
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
