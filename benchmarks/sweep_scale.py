"""What a sweep's driver spends per trial as the sweep grows (issue #35, item 8).

    .venv/bin/python benchmarks/sweep_scale.py [--n 50 200 1000] [--location file s3] [--workdir DIR] \
        [--trial-runner ray-train tune-actor] [--algorithm grid random tpe motpe nsga2]

For each N and work location: a sweep of N configurations of the smallest student (the smoke
spec's random 2-layer teacher, 1-layer students, 64 training examples, 2 optimizer steps) through
real Ray Tune, Train, the recorder, MLflow on the location's own SQLite file, the store and the
select stage; `file` is a `file://` URI (a remote location with a node mirror), `s3` moto's S3
server on 127.0.0.1 (tests/s3server.py). The prepare and teacher stages run first and are cached.
Printed, one row per sweep:

  driver CPU s/trial   CPU seconds of the sweep's own process (its threads: the recorder, the
                       searcher, Tune's loop) during the search stage, per trial
  driver peak MB       its peak resident memory (ru_maxrss) at the end of the sweep
  pushed KB/trial      bytes the driver pushed to the work location during the search stage
                       (results table, mlflow.db; a trial's own folder is pushed by its rank 0
                       and is the same size at any N), per trial
  MLflow calls/trial   calls the driver made to MlflowClient during the search stage, per trial
  search s/trial       the search stage's wall time, per trial (two trials at a time on two cores)
  select s             the measure + select stage (latency, front, report, registry) in seconds
  pushed MB all        everything the driver pushed, the cache, teacher and select stage included

The trials' Ray Train start-up (~25 s each on a 2-core machine) dominates the wall time: N=1,000
is hours there, minutes on a 16-core node with more concurrent trials. `--trial-runner
tune-actor` runs each one-worker trial in its Tune actor instead (`resources.trial_runner`): no
Train job per trial, and under FIFO the actor and its imports are reused by the next trial.
`--algorithm motpe` (or random, tpe, nsga2) makes it a searched sweep of budget N over a
learning-rate range instead of a grid: the study's suggestions, its told configurations and its
journal pushes (after every ask, tell and snapshot) are then the driver's work too.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
from mlflow import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import sweep as sweep_module  # noqa: E402
from pipeline.config import load_spec  # noqa: E402
from pipeline.prepare.stage import prepare  # noqa: E402
from pipeline.storage import WorkStore  # noqa: E402
from pipeline.training.teacher import ensure_teacher  # noqa: E402


class Meter:
    """What the driver does, counted where it happens: pushes (bytes), MLflow calls, stage time."""

    def __init__(self) -> None:
        self.pushed = 0
        self.calls: Counter[str] = Counter()
        self.select_s = 0.0
        self.patches: list[tuple[object, str, object]] = []

    def patch(self, owner: object, name: str, wrapper) -> None:
        original = getattr(owner, name)
        self.patches.append((owner, name, original))
        setattr(owner, name, functools.wraps(original)(wrapper(original)))

    def install(self) -> None:
        def push(original):
            def counted(store, key):
                path = store.path(key)
                self.pushed += sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
                return original(store, key)
            return counted

        self.patch(WorkStore, "push", push)
        for name in [n for n in vars(MlflowClient) if not n.startswith("_") and callable(getattr(MlflowClient, n))]:
            def calls(original, name=name):
                def counted(*args, **kwargs):
                    self.calls[name] += 1
                    return original(*args, **kwargs)
                return counted
            self.patch(MlflowClient, name, calls)

        def select(original):
            def timed(*args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.select_s += time.perf_counter() - t0
            return timed

        self.patch(sweep_module, "select_stage", select)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self.patches):
            setattr(owner, name, original)


def spec_for(n: int, location: str, runner: str = "ray-train", algorithm: str = "grid"):
    """N configurations of one method: a grid of N learning rates, or a searching algorithm's
    budget of N over the same range (its study, suggestions and journal pushes in the driver)."""
    rates = [round(1e-4 * (1 + 9 * i / max(1, n - 1)), 8) for i in range(n)]
    space = (f"methods={{finetune: {{learning_rate: {{grid: {rates}}}}}}}" if algorithm == "grid" else
             "methods={finetune: {learning_rate: {loguniform: [1.0e-4, 1.0e-3]}}}")
    searched = [] if algorithm == "grid" else [f"search.algorithm={algorithm}", f"search.num_configurations={n}"]
    return load_spec(ROOT / "sweeps" / "smoke.yaml", [
        f"name=scale-{location}-{n}", f"tracking.experiment=scale-{location}-{n}", f"tracking.registered_model=scale-{location}-{n}",
        space, *searched, "student.num_layers=1",
        "teacher.architecture.num_layers=2", "task.synthetic.num_train=64", "task.synthetic.num_dev=32",
        "train.max_steps=2", "train.eval_every=2", "search.scheduler=fifo",
        "selection.latency.min_runs=3", "selection.latency.min_seconds=0.1", f"resources.trial_runner={runner}",
    ])


def run_one(n: int, location: str, uri: str, runner: str = "ray-train", algorithm: str = "grid") -> dict[str, float]:
    spec = spec_for(n, location, runner, algorithm)
    store = WorkStore.open(uri)
    ensure_teacher(spec, prepare(spec, store.local), store.local, log=lambda _: None)
    meter, me = Meter(), psutil.Process()
    marks: dict[str, float] = {}

    def log(message: str) -> None:
        if message.startswith("search:") and "search" not in marks:
            marks["search"], marks["pushed_before"] = sum(me.cpu_times()[:2]), meter.pushed
            marks["search_at"] = time.perf_counter()
            marks["calls_before"] = sum(meter.calls.values())
        if message.startswith(("latency:", "select:")) and "end" not in marks:
            marks["end"], marks["pushed_search"] = sum(me.cpu_times()[:2]), meter.pushed - marks.get("pushed_before", 0)
            marks["end_at"] = time.perf_counter()
            marks["calls_search"] = sum(meter.calls.values()) - marks.get("calls_before", 0)

    meter.install()
    try:
        frame = sweep_module.run_sweep(spec, uri, log=log)
    finally:
        meter.uninstall()
    cpu = marks.get("end", sum(me.cpu_times()[:2])) - marks.get("search", 0.0)
    return {"n": n, "trials": len(frame), "finished": int((frame["status"] == "finished").sum()),
            "driver_cpu_s_per_trial": cpu / len(frame), "driver_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "pushed_kb_per_trial": marks.get("pushed_search", 0) / 1024 / len(frame),
            "mlflow_calls_per_trial": marks.get("calls_search", 0) / len(frame),
            "search_s_per_trial": (marks.get("end_at", 0.0) - marks.get("search_at", 0.0)) / len(frame),
            "select_s": meter.select_s,
            "pushed_mb_all": meter.pushed / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--location", choices=["file", "s3"], nargs="+", default=["file", "s3"])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/drydock-scale"))
    parser.add_argument("--trial-runner", choices=["ray-train", "tune-actor"], default="ray-train")
    parser.add_argument("--algorithm", choices=["grid", "random", "tpe", "motpe", "nsga2"], default="grid",
                        help="search.algorithm: grid (N learning rates) or a study with a budget of N")
    args = parser.parse_args()
    os.environ.setdefault("DRYDOCK_CACHE_DIR", str(args.workdir / "node-cache"))
    rows = []
    for location in args.location:
        with contextlib.ExitStack() as stack:
            if location == "s3":
                from tests.s3server import BUCKET, s3_server

                os.environ.update(stack.enter_context(s3_server()))
                base = f"s3://{BUCKET}/scale"
            else:
                (args.workdir / "bucket").mkdir(parents=True, exist_ok=True)
                base = (args.workdir / "bucket").as_uri()
            for n in args.n:
                rows.append({"location": location, "runner": args.trial_runner, "algorithm": args.algorithm,
                             **run_one(n, location, f"{base}-{args.trial_runner}-{args.algorithm}-{n}", args.trial_runner,
                                       args.algorithm)})
                print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    import pandas as pd

    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
