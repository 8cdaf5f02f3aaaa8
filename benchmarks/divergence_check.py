"""Cost of the loop's per-step divergence agreement (`engine.diverged_ranks`) under DDP on gloo.

    .venv/bin/python benchmarks/divergence_check.py [--world 2] [--calls 2000] [--repeats 5]

Every training step, each rank all-reduces `world_size` flags so that a loss that turns NaN on one
rank stops every rank at the same step (else the others wait in their next gradient all-reduce
until the backend's timeout). This prints the median time of one such call over `--repeats` runs
of `--calls` calls, per rank, on CPU processes with the gloo backend; compare it with a step's
time (benchmarks/step_overhead.py prints the loop's ms per step).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.training import engine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, calls: int, repeats: int, out: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        setting = engine.Distributed(strategy="ddp", world_size=world, rank=rank)
        for _ in range(100):  # warm-up: connections, allocator
            engine.diverged_ranks(1.0, setting)
        medians = []
        for _ in range(repeats):
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                engine.diverged_ranks(1.0, setting)
                times.append(time.perf_counter() - t0)
            medians.append(statistics.median(times))
        with open(f"{out}.{rank}", "w") as f:
            f.write(f"{statistics.median(medians) * 1e6:.1f}")
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    out = f"/tmp/drydock-divergence-check-{os.getpid()}"
    mp.spawn(_worker, args=(args.world, _free_port(), args.calls, args.repeats, out), nprocs=args.world, join=True)
    per_rank = [float(open(f"{out}.{r}").read()) for r in range(args.world)]
    for r in range(args.world):
        os.remove(f"{out}.{r}")
    print(f"diverged_ranks, gloo, {args.world} ranks: median µs per call per rank: "
          + ", ".join(f"{v:.1f}" for v in per_rank))


if __name__ == "__main__":
    main()
