"""Latency of exported students (and the teacher) on the spec's target device.

A latency figure is only worth comparing when every model was timed the same way on the same
kind of machine, alone. So:

- each folder is loaded the way a consumer loads it
  (`AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True)`), so a
  student that is only fast inside drydock does not count;
- inputs are exactly `batch_size × seq_length` random token ids with a full attention mask: a
  padded batch would let a model that truncates look faster than it is;
- warm-up runs first (allocator, kernel selection, lazy initialisation), then timed runs until
  both `min_runs` and `min_seconds` are reached and the median has settled (`time_forward`); p50
  is the headline figure because it shrugs off the odd scheduler hiccup that would drag a mean,
  and p90 says how bad the hiccups are;
- under Ray, each measurement is a task that reserves a whole node of the target type (all its
  CPUs, and all its GPUs for `cuda`), and measurements run one after another: two timings on one
  machine slow each other down. The teacher goes through the same path in the same stage, so
  `speedup = teacher p50 / student p50` is a ratio measured on one kind of machine;
- without Ray (unit tests, `drydock report`), the same function runs in this process.

`<sweep_dir>/latency.json` keeps the settings and every measurement, teacher included, so the
report can be rebuilt later without timing anything again.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from pipeline.config import LatencyConfig
from pipeline.errors import DrydockError

LATENCY_FILE = "latency.json"
STABLE_TOLERANCE = 0.05  # stop once the median's ~95% interval is within ±5% of it ...
MAX_SECONDS_FACTOR = 5  # ... or after 5 × min_seconds, whichever comes first
TEACHER = "teacher"  # the key of the teacher's measurement among the targets


class Measurement(BaseModel):
    """One model's timing, with everything needed to say what the number means."""

    model_config = ConfigDict(frozen=True)

    path: str
    p50_ms: float
    p90_ms: float
    mean_ms: float
    throughput: float  # examples per second at p50
    runs: int
    warmup: int
    batch_size: int
    seq_length: int
    device: str  # cpu | cuda
    device_name: str  # CPU model or GPU name
    threads: int
    torch_version: str
    num_params: int
    hostname: str

    @property
    def description(self) -> str:
        """The one line a latency is reported with (MLflow tags, the report, registry tags)."""
        return f"{self.device_name} ({self.device}, {self.threads} threads, torch {self.torch_version})"


class LatencyRecord(BaseModel):
    """`latency.json`: what the select stage measured, so reports rebuild without re-timing."""

    settings: LatencyConfig
    teacher: Measurement | None = None
    teacher_name: str | None = None
    students: dict[str, Measurement] = {}  # by trial_id
    errors: dict[str, str] = {}  # trial_id → why it could not be measured
    measured_at: str = ""


# ----------------------------------------------------------------------------------------------
# one measurement, in whatever process runs it
# ----------------------------------------------------------------------------------------------


def cpu_name() -> str:
    """/proc/cpuinfo names the CPU model on Linux; platform is the fallback elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def check_seq_length(path: Path, settings: LatencyConfig) -> None:
    """A sequence longer than the model's position table fails deep inside torch; say so first."""
    from transformers import AutoConfig

    if not (path / "config.json").is_file():
        raise DrydockError(f"{path}: not a saved model folder (no config.json)")
    config = AutoConfig.from_pretrained(str(path), trust_remote_code=True)
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and settings.seq_length > positions:
        raise DrydockError(
            f"selection.latency.seq_length: {settings.seq_length} exceeds the {positions} positions of the model in {path}"
        )


def measure_folder(path: str | Path, settings: dict[str, Any] | LatencyConfig, threads: int | None = None) -> Measurement:
    """Load a saved model like a consumer and time it. `threads` is the fallback when the
    settings leave the thread count open (a Ray task passes the CPUs it was given)."""
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    settings = LatencyConfig.model_validate(settings) if isinstance(settings, dict) else settings
    hf_logging.set_verbosity_error()
    if settings.device == "cuda" and not torch.cuda.is_available():
        raise DrydockError("selection.latency.device: cuda, but this machine has no visible GPU")
    device = torch.device(settings.device)
    previous_threads = torch.get_num_threads()
    wanted_threads = settings.threads or threads or previous_threads
    torch.set_num_threads(wanted_threads)
    try:
        model = AutoModelForSequenceClassification.from_pretrained(str(path), trust_remote_code=True).eval().to(device)
        inputs = random_inputs(model, settings.batch_size, settings.seq_length, device)
        times = time_forward(model, inputs, settings, synchronize=torch.cuda.synchronize if device.type == "cuda" else None)
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
        num_params = sum(p.numel() for p in model.parameters())
    finally:
        torch.set_num_threads(previous_threads)
    p50 = float(np.median(times))
    return Measurement(
        path=str(path), p50_ms=p50, p90_ms=float(np.percentile(times, 90)), mean_ms=float(np.mean(times)),
        throughput=settings.batch_size * 1000.0 / p50, runs=len(times), warmup=settings.warmup,
        batch_size=settings.batch_size, seq_length=settings.seq_length, device=settings.device,
        device_name=device_name, threads=wanted_threads, torch_version=torch.__version__, num_params=num_params,
        hostname=platform.node(),
    )


def random_inputs(model, batch_size: int, seq_length: int, device) -> dict[str, Any]:
    """Full-length rows: every position is attended, as in the worst case a consumer sends."""
    import inspect

    import torch

    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, model.config.vocab_size, (batch_size, seq_length), generator=generator)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if "token_type_ids" in inspect.signature(model.forward).parameters:
        inputs["token_type_ids"] = torch.zeros_like(input_ids)
    return {k: v.to(device) for k, v in inputs.items()}


def median_interval(times: list[float]) -> tuple[float, float]:
    """A distribution-free ~95% interval of the median: the order statistics n/2 ∓ 0.98·√n."""
    ordered = sorted(times)
    n = len(ordered)
    low = max(0, math.floor(n / 2 - 0.98 * math.sqrt(n)))
    high = min(n - 1, math.ceil(n / 2 + 0.98 * math.sqrt(n)))
    return ordered[low], ordered[high]


def median_is_stable(times: list[float], tolerance: float = STABLE_TOLERANCE) -> bool:
    if len(times) < 3:
        return False
    low, high = median_interval(times)
    return high - low <= 2 * tolerance * float(np.median(times))


def time_forward(model, inputs: dict[str, Any], settings: LatencyConfig, synchronize: Callable[[], None] | None = None) -> list[float]:
    """Milliseconds per forward pass: warm-up, then timed runs until `min_runs` and
    `min_seconds` are met *and* the median is stable (its ~95% interval within ±5%), or
    MAX_SECONDS_FACTOR × min_seconds have passed. A quiet dedicated node stops at the minimums;
    a busy machine keeps sampling until the median stops moving instead of reporting a lucky
    or unlucky handful of runs."""
    import torch

    sync = synchronize or (lambda: None)
    times: list[float] = []
    cap = MAX_SECONDS_FACTOR * settings.min_seconds
    with torch.inference_mode():
        for _ in range(settings.warmup):
            model(**inputs)
        sync()
        started = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            model(**inputs)
            sync()  # a GPU call returns before the kernels finish: time the work, not the launch
            times.append((time.perf_counter() - t0) * 1000.0)
            elapsed = time.perf_counter() - started
            if len(times) >= settings.min_runs and elapsed >= settings.min_seconds and (median_is_stable(times) or elapsed >= cap):
                return times


# ----------------------------------------------------------------------------------------------
# many measurements: one whole node each, one at a time
# ----------------------------------------------------------------------------------------------


def _ray_if_running():
    """Ray only when the caller started it: importing it would cost seconds and start nothing."""
    ray = sys.modules.get("ray")
    return ray if ray is not None and ray.is_initialized() else None


def node_request(device: str) -> dict[str, float]:
    """Resources of the biggest alive node that has the target device: asking for all of it
    keeps every other task (training, another measurement) off that machine while we time."""
    ray = _ray_if_running()
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if device == "cuda":
        nodes = [r for r in nodes if r.get("GPU", 0) > 0]
        if not nodes:
            raise DrydockError("selection.latency.device: cuda, but the Ray cluster has no node with a GPU")
        best = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)))
        return {"num_cpus": best.get("CPU", 0), "num_gpus": best["GPU"]}
    if not nodes:
        raise DrydockError("the Ray cluster has no alive node to measure latency on")
    best = max(nodes, key=lambda r: r.get("CPU", 0))
    return {"num_cpus": best.get("CPU", 1), "num_gpus": 0}


def _measure_on_node(path: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The Ray task body: the thread count defaults to the CPUs the task was granted."""
    import ray

    granted = ray.get_runtime_context().get_assigned_resources().get("CPU")
    return measure_folder(path, settings, threads=int(granted) if granted else os.cpu_count()).model_dump()


def measure_all(
    targets: dict[str, Path],
    settings: LatencyConfig,
    log: Callable[[str], None] = print,
) -> tuple[dict[str, Measurement], dict[str, str]]:
    """Time every target (key → model folder), sequentially; returns (measurements, errors).

    A folder that cannot be loaded or run is recorded as an error for its key and the others
    go on, as a failing trial does in a sweep. A user mistake in the settings (a sequence longer
    than a model's positions, cuda without a GPU) stops everything before any timing.
    """
    for path in targets.values():
        check_seq_length(Path(path), settings)
    ray = _ray_if_running()
    remote = None
    if ray is not None:
        request = node_request(settings.device)
        remote = ray.remote(**request, max_retries=0)(_measure_on_node)
        gpus = f", {request['num_gpus']:g} GPUs" if request["num_gpus"] else ""
        log(f"latency: {len(targets)} models, one at a time, each on a whole node ({request['num_cpus']:g} CPUs{gpus})")
    measured: dict[str, Measurement] = {}
    errors: dict[str, str] = {}
    for key, path in targets.items():
        try:
            if remote is not None:
                result = Measurement.model_validate(ray.get(remote.remote(str(path), settings.model_dump())))
            else:
                result = measure_folder(path, settings)
        except DrydockError:
            raise
        except Exception as e:  # noqa: BLE001 — a broken student must not hide the others' figures
            cause = getattr(e, "cause", None) or e  # Ray wraps the task's exception
            errors[key] = f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}"
            log(f"latency: {key}: could not be measured ({errors[key][:200]})")
            continue
        measured[key] = result
        log(f"latency: {key}: p50 {result.p50_ms:.2f} ms, p90 {result.p90_ms:.2f} ms ({result.runs} runs)")
    return measured, errors


# ----------------------------------------------------------------------------------------------
# latency.json and the results columns
# ----------------------------------------------------------------------------------------------


def save_record(sweep_dir: Path, record: LatencyRecord) -> Path:
    path = sweep_dir / LATENCY_FILE
    record = record.model_copy(update={"measured_at": record.measured_at or datetime.now(UTC).isoformat(timespec="seconds")})
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(record.model_dump_json(indent=2))
    os.replace(tmp, path)
    return path


def load_record(sweep_dir: Path) -> LatencyRecord | None:
    path = sweep_dir / LATENCY_FILE
    if not path.is_file():
        return None
    try:
        return LatencyRecord.model_validate(json.loads(path.read_text()))
    except (ValueError, TypeError) as e:
        raise DrydockError(f"{path}: not a latency record written by drydock ({type(e).__name__})") from None


def fill_latency(frame, students: dict[str, Measurement], teacher: Measurement | None):
    """results.parquet's latency_ms, latency_p90_ms and speedup, by trial_id (others: null)."""
    frame = frame.copy()
    by_trial = frame["trial_id"].astype(str)
    frame["latency_ms"] = by_trial.map(lambda t: students[t].p50_ms if t in students else np.nan).astype("float64")
    frame["latency_p90_ms"] = by_trial.map(lambda t: students[t].p90_ms if t in students else np.nan).astype("float64")
    frame["speedup"] = (teacher.p50_ms / frame["latency_ms"]) if teacher is not None else np.nan
    frame["speedup"] = frame["speedup"].astype("float64")
    return frame
