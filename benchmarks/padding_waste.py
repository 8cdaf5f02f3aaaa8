"""Tokens a run computes per token of its data, by how its batches are formed: the figure behind
`train.group_by_length` (`pipeline.training.batches.EpochSampler`) and the evaluation's batches
taken by length (`pipeline.training.evaluation.predict`).

    .venv/bin/python benchmarks/padding_waste.py <prepared data folder> [--batch 32]

The folder is a sweep's prepared data (`<workdir>/cache/data-<fingerprint>`, with `train/` and
`dev/` Arrow splits). Dynamic padding pads each batch to its longest row, so a batch computes
rows × its longest row's length; this prints that total over the rows' own tokens for the
training split in random batches (the sampler's plain permutation, as before the switch) and
grouped by length, and for the dev split in order and by length. Counting only: no model runs,
and attention's cost grows faster than the count does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import datasets
import numpy as np

from pipeline.prepare.padding import row_lengths
from pipeline.training.batches import EpochSampler


def padded(order: list[int] | np.ndarray, lengths: np.ndarray, batch: int) -> int:
    return int(sum(len(order[i:i + batch]) * lengths[order[i:i + batch]].max() for i in range(0, len(order), batch)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train = np.asarray(row_lengths(datasets.load_from_disk(str(args.data / "train"))))
    dev = np.asarray(row_lengths(datasets.load_from_disk(str(args.data / "dev"))))
    print(f"train: {len(train)} rows, mean {train.mean():.1f} tokens, median {np.median(train):.0f}, max {train.max()}")
    plain = EpochSampler(len(train), args.seed).indices()
    grouped = EpochSampler(len(train), args.seed, lengths=train.tolist(), chunk=args.batch).indices()
    for name, order in (("random batches", plain), ("grouped by length", grouped)):
        total = padded(order, train, args.batch)
        print(f"  {name:18} of {args.batch}: {total / train.sum():.2f}x the rows' tokens "
              f"(mean padded length {total / len(train):.1f})")
    print(f"dev: {len(dev)} rows, mean {dev.mean():.1f} tokens, max {dev.max()}")
    for name, order in (("in order", np.arange(len(dev))), ("by length", np.argsort(dev, kind="stable"))):
        print(f"  {name:18} of {args.batch}: {padded(order, dev, args.batch) / dev.sum():.2f}x the rows' tokens")


if __name__ == "__main__":
    main()
