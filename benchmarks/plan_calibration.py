"""`drydock plan`'s training-throughput share: a MiniLM-sized training step on one and two CPU
threads against the plan's probe of one thread's float32 matrix product, in one run.

    .venv/bin/python benchmarks/plan_calibration.py [--steps 12] [--repeats 3]

The plan estimates a step at 6 FLOPs per encoder-layer parameter per token, at
TRAINING_SHARE × the probe per thread (`pipeline/cli/plan.py`). This prints the step's own
throughput in those units (6 × 10.65M layer parameters × 32 × 64 tokens / median step time),
the probe's, and their ratio: the figure TRAINING_SHARE should hold. The probe runs before and
after each repeat, so a machine that changed speed between the two shows it. Run it idle.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from step_overhead import BATCH, LENGTH, dataset, plain_steps

from pipeline.cli.plan import TRAINING_SHARE, layer_params, probe_matmul_flops

LAYER_PARAMETERS = 6 * layer_params(384, 1536)  # the MiniLM-sized model of step_overhead.py


def step_flops_per_thread(seconds: float, threads: int) -> float:
    return 6 * LAYER_PARAMETERS * BATCH * LENGTH / seconds / threads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = dataset(args.steps * BATCH)
    probes: list[float] = []
    steps: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for threads in steps:
            probes.append(probe_matmul_flops())
            torch.set_num_threads(threads)
            steps[threads] += plain_steps(data, args.steps)[2:]  # drop warm-up steps
    probes.append(probe_matmul_flops())
    probe = statistics.median(probes)
    print(f"batch={BATCH} seq={LENGTH} steps={args.steps}x{args.repeats}; layer parameters {LAYER_PARAMETERS:,}")
    print(f"probe (numpy float32 {1024}² product, one thread): median {probe / 1e9:.1f} GFLOP/s "
          f"(min {min(probes) / 1e9:.1f}, max {max(probes) / 1e9:.1f}, {len(probes)} probes)")
    for threads, times in steps.items():
        step = statistics.median(times)
        per_thread = step_flops_per_thread(step, threads)
        print(f"training step, {threads} thread(s): median {step * 1000:.0f} ms = {per_thread / 1e9:.1f} GFLOP/s per thread "
              f"= {per_thread / probe:.2f} × the probe")
    print(f"TRAINING_SHARE in pipeline/cli/plan.py: {TRAINING_SHARE}")


if __name__ == "__main__":
    main()
