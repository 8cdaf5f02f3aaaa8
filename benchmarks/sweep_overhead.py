"""Seconds a sweep spends per trial outside the training loop (Ray, Tune, MLflow, export, verify).

    .venv/bin/python benchmarks/sweep_overhead.py [--trials 6] [--workdir /tmp/drydock-overhead]

Runs the smoke spec with `--trials` kd configurations (FIFO, one worker per trial, as many
concurrent trials as the CPUs allow). The prepare and teacher stages are run first and cached,
so the timed sweep measures the search stage as a re-run of a sweep sees it. Printed:
wall time of `run_sweep`, the sum of the trials' training-loop seconds, and
(wall - sum of training seconds) / trials, for the whole sweep and for the search stage alone
(Ray start-up, Tune, Train workers, export verification; the measure/select/register stage that
follows is reported separately). Target: under 10 s per trial on a 2-core machine.

Also printed: the CPU seconds that the driver and every process of the Ray instance (its
children: raylet, GCS, dashboard, Tune and Train actors) spent during the search stage, per trial,
and how busy that kept the machine's CPUs. The wall-clock figure swings by a second or more per
trial between runs on this machine; the CPU figure tells what a change removed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
import time
from pathlib import Path

import psutil

from pipeline.config import load_spec
from pipeline.prepare.stage import prepare
from pipeline.search.ray_instance import max_concurrent
from pipeline.sweep import run_sweep
from pipeline.training.teacher import ensure_teacher

ROOT = Path(__file__).resolve().parents[1]


class CpuMeter:
    """CPU seconds of this process and all its descendants, sampled every `interval` seconds.

    A process's last sample is kept after it exits, so up to `interval` of its CPU time is missed.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval, self.seen, self.lock = interval, {}, threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self.stop.wait(self.interval):
            self.sample(me)

    def sample(self, me: psutil.Process | None = None) -> None:
        me = me or psutil.Process()
        for p in [me, *me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                key = (p.pid, p.create_time())
            except psutil.Error:
                continue
            with self.lock:
                self.seen[key] = t.user + t.system

    def total(self) -> float:
        self.sample()
        with self.lock:
            return sum(self.seen.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/drydock-overhead"))
    args = parser.parse_args()
    alphas = [round(0.1 + 0.8 * i / max(1, args.trials - 1), 3) for i in range(args.trials)]
    spec = load_spec(ROOT / "sweeps" / "smoke.yaml", [f"methods={{kd: {{alpha: {{grid: {alphas}}}}}}}", "search.scheduler=fifo"])
    shutil.rmtree(args.workdir / spec.name, ignore_errors=True)
    ensure_teacher(spec, prepare(spec, args.workdir), args.workdir, log=lambda _: None)

    marks: dict[str, float] = {}
    cpu_marks: dict[str, float] = {}
    meter = CpuMeter()
    meter.thread.start()

    def log(message: str) -> None:  # the stages announce themselves: time the search alone too
        for stage in ("search", "latency", "select", "registry"):
            if message.startswith(stage) and stage not in marks:
                marks[stage] = time.perf_counter()
                cpu_marks[stage] = meter.total()

    start = time.perf_counter()
    frame = run_sweep(spec, args.workdir, log=log)
    wall = time.perf_counter() - start
    meter.stop.set()
    search = marks.get("latency", marks.get("select", start + wall)) - marks.get("search", start)
    search_cpu = cpu_marks.get("latency", cpu_marks.get("select", meter.total())) - cpu_marks.get("search", 0.0)
    finished = frame[frame["status"] == "finished"]
    train = float(finished["train_seconds"].sum())
    n = len(frame)
    print(f"trials={n} finished={len(finished)} max_concurrent={max_concurrent(spec)}")
    print(f"sweep wall {wall:.1f}s, training loops {train:.1f}s in total")
    print(f"search stage {search:.1f}s (Ray start, trials, verification), then measure+select+register {start + wall - marks.get('latency', start + wall):.1f}s")
    print(f"overhead per trial, whole sweep:  {(wall - train) / n:.1f}s")
    print(f"overhead per trial, search stage: {(search - train) / n:.1f}s  (target < 10 s)")
    cpus = os.cpu_count() or 1
    print(f"search stage CPU: {search_cpu:.1f} CPU-s, {search_cpu / n:.1f} CPU-s per trial, "
          f"{search_cpu - train:.1f} outside the training loops; {search_cpu / (search * cpus):.0%} of {cpus} CPUs busy")


if __name__ == "__main__":
    main()
