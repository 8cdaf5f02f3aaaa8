"""Latency of exported students (and the teacher) on the spec's target device.

A latency figure is only worth comparing when every model was timed the same way on the same
kind of machine, alone. So:

- each folder is loaded the way a consumer loads it
  (`AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=...)`, True only
  for custom code that is the recorded code: `pipeline.prepare.remote_code`), so a
  student that is only fast inside drydock does not count;
- inputs are exactly `batch_size × seq_length` random token ids with a full attention mask: a
  padded batch would let a model that truncates look faster than it is;
- warm-up runs first (allocator, kernel selection, lazy initialisation), then timed runs until
  both `min_runs` and `min_seconds` are reached and the median has settled (`time_alone`: the
  interleaved engine, `pipeline.measure.interleaved`, with one runner); p50
  is the headline figure because it shrugs off the odd scheduler hiccup that would drag a mean,
  and p90 says how bad the hiccups are;
- every measurement records the device model it ran on (`Measurement.device_name`: the GPU's
  name from torch, or the CPU's model), the node and the process.

Under Ray (the sweep's select stage, when it builds no runtime variants: with variants the
eager figures are the variants job's, `pipeline.measure.eager`), measurements run in parallel,
one node per measuring process (`measure_all`):

- `plan_nodes` picks the nodes, from `ray.nodes()`: for `device: cuda`, the GPU nodes of one
  accelerator type — `selection.latency.accelerator_type`, matched against the
  `accelerator_type:<name>` resource Ray puts on a node whose GPU it recognises
  (`ACCELERATOR_PREFIX`), or the cluster's only type; several types and none named is a spec
  error before anything is timed, naming the field and the types present. For `device: cpu`,
  the nodes of the named accelerator type when one is given (their CPUs), else the nodes
  without GPUs (all nodes when every node has one: the CPU of a GPU machine is usually another
  model, and its GPUs are better left free), and of those only the ones with the most CPUs (one
  shape, so every timing gets the same thread count). At most one node per student is used.
- one long-lived actor per node (`MeasuringActor`) reserves the whole node (all its CPUs, and
  all its GPUs for cuda), so no trial or other measurement shares the machine while it times.
  Actors that have not started `READY_GRACE_S` after the first one did (their node is busy
  with other work) are given up; then only the nodes of the most common device model are kept
  (`same_device_model`), so every latency of a sweep comes from one kind of device — the
  accelerator type or CPU count says little about, e.g., a CPU model or a GPU's memory size.
- each actor times the teacher first, then takes students one at a time from a shared queue
  until it is empty; a student's `speedup` is the p50 of the teacher *on its own node* over its
  own p50 (`fill_latency`), never a ratio across two machines. One process per node serves all
  of its measurements: a plain Ray task that asks for a GPU gets a fresh worker process per call
  (Ray's default `max_calls=1` for GPU tasks: docs/stack-facts.md, "Measuring latency on Ray"),
  which would re-import torch and re-initialise CUDA for every student.
- a node lost mid-way (its actor dies) hands its unfinished students back to the queue, once.
- the runtime variants (`pipeline.measure.job`) are built, scored and timed by one
  actor on one planned node (`on_one_node`): their timings are interleaved rounds, which
  only mean something within one process, so they are never spread over nodes.

Without Ray (unit tests, `drydock report`), the same functions run in this process, one after
another, the teacher first.

`<sweep_dir>/latency.json` keeps the settings and every measurement, the teacher on each node
included, so the report can be rebuilt later without timing anything again.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from pipeline.config import LatencyConfig
from pipeline.errors import DrydockError
from pipeline.measure.interleaved import InterleaveSettings, architecture_key, group_by_key, measure_interleaved
from pipeline.measure.runtimes import EAGER
from pipeline.storage import WorkStore
from pipeline.workdir import LATENCY_FILE, atomic_write

if TYPE_CHECKING:
    import pandas as pd

TEACHER = "teacher"  # the key of the teacher's timing in logs and errors
# the resource Ray gives a node whose accelerator it recognises, one per node (docs/stack-facts.md,
# "Measuring latency on Ray")
ACCELERATOR_PREFIX = "accelerator_type:"
READY_GRACE_S = 30.0  # how long the other measuring actors may take to start once one has
WAIT_LOG_S = 60.0  # while no node is free, say so this often
Outcome = TypeVar("Outcome")  # what a job run `on_one_node` returns


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
    node_id: str = ""  # the Ray node; "" when timed in the calling process (and in records before nodes)
    pid: int = 0  # the measuring process: one per node serves all of that node's measurements
    measured_as: str = ""  # the key of the student of the same architecture actually timed ("" when timed itself)

    @property
    def description(self) -> str:
        """The one line a latency is reported with (MLflow tags, the report, registry tags)."""
        return f"{self.device_name} ({self.device}, {self.threads} threads, torch {self.torch_version})"


class LatencyRecord(BaseModel):
    """`latency.json`: what the select stage measured, so reports rebuild without re-timing."""

    settings: LatencyConfig
    teacher: Measurement | None = None  # the representative timing (`representative_teacher`)
    teachers: dict[str, Measurement] = {}  # node_id → the teacher timed there, each student's reference
    teacher_name: str | None = None
    students: dict[str, Measurement] = {}  # by trial_id
    errors: dict[str, str] = {}  # trial_id (or `teacher@<node_id>`) → why it could not be measured
    not_timed: dict[str, str] = {}  # trial_id → the trial its configuration serves, which was timed instead
    measured_at: str = ""
    # True: read off the variants job's interleaved timing (`pipeline.measure.eager`), every model
    # in one process, speedups the within-round ratios; False: each model timed alone on its node
    interleaved: bool = False


@dataclass
class Timings:
    """What `measure_all` returns: the students by key, the teacher by node, the failures."""

    students: dict[str, Measurement] = field(default_factory=dict)
    teachers: dict[str, Measurement] = field(default_factory=dict)  # node_id → the teacher timed there
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def teacher(self) -> Measurement | None:
        return representative_teacher(self.teachers)


def representative_teacher(teachers: Mapping[str, Measurement]) -> Measurement | None:
    """The one teacher figure a report line or a parent-run metric shows: the (lower) median p50
    of the nodes' timings. Speedups never use it; each uses its own node's teacher."""
    ordered = sorted(teachers.values(), key=lambda m: (m.p50_ms, m.node_id))
    return ordered[(len(ordered) - 1) // 2] if ordered else None


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
    from pipeline.prepare.remote_code import remote_code

    config = AutoConfig.from_pretrained(str(path), trust_remote_code=remote_code(path))  # refuses unrecorded code
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

    from pipeline.prepare.remote_code import remote_code

    settings = LatencyConfig.model_validate(settings) if isinstance(settings, dict) else settings
    hf_logging.set_verbosity_error()
    if settings.device == "cuda" and not torch.cuda.is_available():
        raise DrydockError("selection.latency.device: cuda, but this machine has no visible GPU")
    device = torch.device(settings.device)
    previous_threads = torch.get_num_threads()
    wanted_threads = settings.threads or threads or previous_threads
    torch.set_num_threads(wanted_threads)
    try:
        trust = remote_code(path)  # False for a stock BERT; raises for code that is not the recorded code
        model = AutoModelForSequenceClassification.from_pretrained(str(path), trust_remote_code=trust).eval().to(device)
        inputs = random_inputs(model, settings.batch_size, settings.seq_length, device)
        with torch.inference_mode():
            times = time_alone(partial(model, **inputs), settings, torch.cuda.synchronize if device.type == "cuda" else None, str(path))
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
        hostname=platform.node(), pid=os.getpid(),
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


def time_alone(forward: Callable[[], object], settings: LatencyConfig, synchronize: Callable[[], object] | None = None,
               name: str = "model") -> list[float]:
    """Milliseconds per forward pass of one model timed alone, by the one timing engine
    (`pipeline.measure.interleaved.measure_interleaved` with a single runner): `warmup` calls,
    then timed passes until `min_runs` and `min_seconds` are met *and* the median is stable (its
    ~95% interval within ±5%), or MAX_SECONDS_FACTOR × min_seconds have passed. A quiet dedicated
    node stops at the minimums; a busy machine keeps sampling until the median stops moving
    instead of reporting a lucky or unlucky handful of runs. No warm passes: alone, the pass
    before each timed one is the same model's already. A forward that raises raises here, as itself."""
    interleave = InterleaveSettings(warmup=settings.warmup, warm_passes=0, min_rounds=settings.min_runs,
                                    min_seconds=settings.min_seconds)
    try:
        result = measure_interleaved({name: forward}, settings=interleave, synchronize=synchronize, drop_failures=False)
    except Exception as e:
        e.add_note(f"{name}: the forward pass failed while timed")  # the type stays the caller's to tell
        raise
    return result.round_times_ms[name]


# ----------------------------------------------------------------------------------------------
# which nodes: pure functions of `ray.nodes()`
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuringNode:
    """A Ray node that may time models, with the resources that reserve all of it."""

    node_id: str
    host: str
    cpus: float
    gpus: float
    accelerator_type: str | None  # Ray's name of its accelerator (`ACCELERATOR_PREFIX`), None if it gave none

    @property
    def request(self) -> dict[str, float]:
        return {"num_cpus": self.cpus, "num_gpus": self.gpus}


def cluster_nodes(nodes: list[dict[str, Any]]) -> list[MeasuringNode]:
    """The alive nodes of `ray.nodes()` (a list of dicts with NodeID, Alive, Resources and the
    node manager's host name or address)."""
    out = []
    for n in nodes:
        if not n.get("Alive"):
            continue
        resources = n.get("Resources") or {}
        types = sorted(k[len(ACCELERATOR_PREFIX):] for k in resources if k.startswith(ACCELERATOR_PREFIX))
        out.append(MeasuringNode(
            node_id=str(n["NodeID"]), host=str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or ""),
            cpus=float(resources.get("CPU", 0)), gpus=float(resources.get("GPU", 0)),
            accelerator_type=types[0] if types else None,
        ))
    return out


def _type_counts(nodes: list[MeasuringNode]) -> str:
    """`A100 ×2, T4 ×1`: the accelerator types of these nodes, for an error message."""
    counts = Counter(n.accelerator_type or "no accelerator type" for n in nodes)
    return ", ".join(f"{name} ×{count}" for name, count in sorted(counts.items()))


def plan_nodes(nodes: list[dict[str, Any]], settings: LatencyConfig, max_nodes: int | None = None) -> list[MeasuringNode]:
    """The nodes to time on (see the module docstring), biggest first, at most `max_nodes`.
    Raises DrydockError, naming the field, when the cluster has no such node or, for cuda, GPU
    nodes of several types and `selection.latency.accelerator_type` names none."""
    alive = cluster_nodes(nodes)
    wanted = settings.accelerator_type
    name = "selection.latency.accelerator_type"
    if settings.device == "cuda":
        pool = [n for n in alive if n.gpus > 0]
        if not pool:
            raise DrydockError("selection.latency.device: cuda, but the Ray cluster has no node with a GPU")
        if wanted is None and len({n.accelerator_type for n in pool}) > 1:
            example = next(n.accelerator_type for n in pool if n.accelerator_type)
            raise DrydockError(
                f"{name}: the cluster's GPU nodes are of several types ({_type_counts(pool)}), and a speedup or a "
                f"latency budget means something on one type only; name the one to time on (e.g. --set {name}={example})")
    else:
        pool = [n for n in alive if n.cpus > 0]
        if not pool:
            raise DrydockError("the Ray cluster has no alive node with CPUs to measure latency on")
        if wanted is None:
            pool = [n for n in pool if n.gpus == 0] or pool
    if wanted is not None:
        typed = [n for n in pool if n.accelerator_type == wanted]
        if not typed:
            kind = "GPU node" if settings.device == "cuda" else "node"
            raise DrydockError(f"{name}: {wanted}, but no alive {kind} of the Ray cluster has that type "
                               f"(present: {_type_counts(pool)})")
        pool = typed
    if settings.device == "cpu":
        most = max(n.cpus for n in pool)
        pool = [n for n in pool if n.cpus == most]  # one shape: every timing gets the same threads
    pool.sort(key=lambda n: (-n.gpus, -n.cpus, n.node_id))
    return pool[:max(1, max_nodes)] if max_nodes is not None else pool


def check_latency_nodes(settings: LatencyConfig) -> None:
    """At the start of a sweep, not after its search: GPU nodes of several types and no
    `accelerator_type` would stop the select stage, so it stops the sweep now. Only when the
    cluster has GPU nodes already (an autoscaling cluster's may come later; select checks again)."""
    ray = _ray_if_running()
    if ray is None or settings.device != "cuda":
        return
    nodes = ray.nodes()
    if any(n.gpus > 0 for n in cluster_nodes(nodes)):
        plan_nodes(nodes, settings)


def same_device_model(models: list[tuple[str, str]]) -> list[str]:
    """Of (node_id, device model) pairs in plan order, the nodes of the most common model (on a
    tie, the first node's): an accelerator type or a CPU count does not pin the model down."""
    if not models:
        return []
    counts = Counter(model for _, model in models)
    first = {model: i for i, (_, model) in reversed(list(enumerate(models)))}
    chosen = min(counts, key=lambda model: (-counts[model], first[model]))
    return [node_id for node_id, model in models if model == chosen]


# ----------------------------------------------------------------------------------------------
# many measurements: in this process, or one long-lived actor per node
# ----------------------------------------------------------------------------------------------


def _ray_if_running():
    """Ray only when the caller started it: importing it would cost seconds and start nothing."""
    ray = sys.modules.get("ray")
    return ray if ray is not None and ray.is_initialized() else None


def device_model(device: str) -> str:
    """The model of the device a measurement on `device` would use, in this process."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no visible GPU"
    return cpu_name()


class MeasuringActor:
    """The Ray actor of one node (`ray.remote` is applied by `measure_all`, so importing this
    module does not import Ray). It lives for the whole stage, so torch, transformers and the
    device are initialised once per node; its thread count defaults to the CPUs it reserved."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = LatencyConfig.model_validate(settings)
        self.stores: dict[str, WorkStore] = {}

    def describe(self) -> dict[str, Any]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "host": platform.node(), "pid": os.getpid(),
                "device_name": device_model(self.settings.device)}

    def measure(self, path: str, location: str | None = None) -> dict[str, Any]:
        """With a work `location`, `path` is its address and the model is fetched to this node
        first (`WorkStore.localize`)."""
        import ray

        if location is not None:
            if location not in self.stores:
                self.stores[location] = WorkStore.open(location)
            path = str(self.stores[location].localize(path))
        granted = ray.get_runtime_context().get_assigned_resources().get("CPU")
        measured = measure_folder(path, self.settings, threads=int(granted) if granted else os.cpu_count())
        return measured.model_copy(update={"node_id": ray.get_runtime_context().get_node_id()}).model_dump()

    def run(self, work: Callable[..., Any], job: Any) -> tuple[Any, list[str]]:
        """`work(job, log, granted_threads=n)` on this node (the select stage's variants job,
        `pipeline.measure.job.run_variant_job`), n the CPUs this actor reserved; its log
        lines come back beside the result, for the driver to print."""
        import ray

        granted = ray.get_runtime_context().get_assigned_resources().get("CPU")
        lines: list[str] = []
        out = work(job, lines.append, granted_threads=int(granted) if granted else os.cpu_count())
        return out, lines


def measure_all(
    students: Mapping[str, Path],
    settings: LatencyConfig,
    log: Callable[[str], None] = print,
    *,
    teacher: Path | None = None,
    store: WorkStore | None = None,
) -> Timings:
    """Time the teacher and every student (key → model folder on this machine): under Ray on
    the planned nodes in parallel (the teacher once on each), else here, one after another.

    A folder that cannot be loaded or run is recorded as an error for its key and the others
    go on, as a failing trial does in a sweep. A user mistake in the settings (a sequence longer
    than a model's positions, cuda without a GPU, no node of the wanted type) stops everything
    before any timing. `store`: the work location, when the folders are copies of it (a
    measuring node then fetches each model from it instead of reading this machine's disk).
    """
    for path in ([teacher] if teacher is not None else []) + list(students.values()):
        check_seq_length(Path(path), settings)
    shape = (settings.batch_size, settings.seq_length)
    keys = {key: architecture_key(json.loads((Path(path) / "config.json").read_text()), EAGER, shape) for key, path in students.items()}
    if len(set(keys.values())) < len(keys):
        log(f"latency: {len(keys)} students of {len(set(keys.values()))} architecture(s): each architecture timed once "
            "(latency does not depend on the weights)")
    ray = _ray_if_running()
    out, pending, first = Timings(), dict(keys), True
    while first or pending:  # the teacher alone when there is no student; again for the groups whose representative could not be timed: its next member
        groups = group_by_key(pending)
        timed = {rep: students[rep] for rep in groups}
        got = (_measure_here(timed, settings, log, teacher) if ray is None
               else _measure_on_nodes(ray, timed, settings, log, teacher, store))
        first = False
        teacher = None if got.teachers else teacher  # timed once (on each node of the first pass)
        out.teachers.update({node: m for node, m in got.teachers.items() if node not in out.teachers})
        pending = {}
        for rep, members in groups.items():
            if rep in got.students:
                out.students[rep] = got.students[rep]
                out.students.update({m: got.students[rep].model_copy(update={"path": str(students[m]), "measured_as": rep})
                                     for m in members[1:]})
            else:
                out.errors[rep] = got.errors.get(rep, "not timed")
                pending.update({m: keys[m] for m in members[1:]})
    return out


def _get(ray, ref) -> Any:
    """`ray.get`, re-raising a DrydockError of the remote side as itself: a user mistake (cuda on
    a node without a visible GPU) stops the stage wherever it was found."""
    try:
        return ray.get(ref)
    except Exception as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, DrydockError):
            raise cause from None
        raise


def _failure(e: BaseException) -> str:
    cause = getattr(e, "cause", None) or e  # Ray wraps the task's exception
    text = str(cause).strip()
    return f"{type(cause).__name__}: {text.splitlines()[-1] if text else ''}"


def _logged(log: Callable[[str], None], key: str, m: Measurement, where: str = "") -> None:
    log(f"latency: {key}{where}: p50 {m.p50_ms:.2f} ms, p90 {m.p90_ms:.2f} ms ({m.runs} runs)")


def _measure_here(students: Mapping[str, Path], settings: LatencyConfig, log: Callable[[str], None],
                  teacher: Path | None) -> Timings:
    out = Timings()
    for key, path in ([(TEACHER, teacher)] if teacher is not None else []) + list(students.items()):
        try:
            m = measure_folder(path, settings)
        except DrydockError:
            raise
        except Exception as e:  # noqa: BLE001 — a broken student must not hide the others' figures
            out.errors[key] = _failure(e)
            log(f"latency: {key}: could not be measured ({out.errors[key][:200]})")
            continue
        if key == TEACHER:
            out.teachers[m.node_id] = m
        else:
            out.students[key] = m
        _logged(log, key, m)
    return out


def _actors(ray, planned: list[MeasuringNode], settings: LatencyConfig) -> dict[str, Any]:
    """node_id → a `MeasuringActor` pinned to that node, reserving all of it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_class = ray.remote(MeasuringActor)
    return {
        n.node_id: actor_class.options(
            **n.request, max_restarts=0, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False),
        ).remote(settings.model_dump())
        for n in planned
    }


def on_one_node(work: Callable[..., Outcome], job: Any, settings: LatencyConfig,
                log: Callable[[str], None] = print) -> Outcome:
    """`work(job, log, granted_threads=...)` under Ray in one `MeasuringActor` on one planned node
    (the variants job: every runner of a shape must share one process), else here (the thread
    count then left to `work`). Returns what `work` returns."""
    ray = _ray_if_running()
    if ray is None:
        return work(job, log, granted_threads=None)
    actors = _actors(ray, plan_nodes(ray.nodes(), settings, max_nodes=1), settings)
    try:
        described = _started(ray, actors, log)
        node_id = next(iter(described))
        log(f"variants: on node {described[node_id]['host']} ({node_id[:12]}, {described[node_id]['device_name']}), "
            "every model and runtime in one process")
        out, lines = _get(ray, actors[node_id].run.remote(work, job))
    finally:
        for actor in actors.values():
            ray.kill(actor)
    for line in lines:
        log(line)
    return out


def _measure_on_nodes(ray, students: Mapping[str, Path], settings: LatencyConfig, log: Callable[[str], None],
                      teacher: Path | None, store: WorkStore | None) -> Timings:
    from ray.exceptions import RayActorError

    planned = plan_nodes(ray.nodes(), settings, max_nodes=len(students))
    actors = _actors(ray, planned, settings)
    out = Timings()
    try:
        described = _started(ray, actors, log)
        keep = same_device_model([(n.node_id, described[n.node_id]["device_name"]) for n in planned if n.node_id in described])
        for node_id in sorted(set(actors) - set(keep)):
            ray.kill(actors.pop(node_id))
            if node_id in described:
                log(f"latency: left out node {described[node_id]['host']} ({node_id[:12]}): its device is "
                    f"{described[node_id]['device_name']}, most planned nodes' is {described[keep[0]]['device_name']}")
        first = next(n for n in planned if n.node_id in actors)
        gpus = f", {first.gpus:g} GPUs" if first.gpus else ""
        log(f"latency: {len(students)} models on {len(actors)} node(s) of {described[first.node_id]['device_name']} "
            f"(each reserved whole: {first.cpus:g} CPUs{gpus}; one process per node"
            + (", the teacher timed on each)" if teacher is not None else ")"))
        _run_queue(ray, RayActorError, actors, described, students, log, teacher, store, out)
    finally:
        for actor in actors.values():
            ray.kill(actor)
    return out


def _started(ray, actors: dict[str, Any], log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """node_id → `describe()` of the actors that started: all of them, or those up
    READY_GRACE_S after the first (a node busy with other work is not waited for)."""
    refs = {actor.describe.remote(): node_id for node_id, actor in actors.items()}
    pending = list(refs)
    ready: list = []
    waited = 0.0
    while not ready:
        ready, pending = ray.wait(pending, num_returns=1, timeout=WAIT_LOG_S)
        if not ready:
            waited += WAIT_LOG_S
            log(f"latency: waiting for a whole node to time on ({waited:.0f} s; every planned node is busy)")
    if pending:
        more, pending = ray.wait(pending, num_returns=len(pending), timeout=READY_GRACE_S)
        ready += more
    described, failures = {}, []
    for ref in ready:
        try:
            described[refs[ref]] = ray.get(ref)
        except Exception as e:  # noqa: BLE001 — a node that cannot host the actor is left out
            failures.append(f"node {refs[ref][:12]}: {_failure(e)[:200]}")
    for ref in pending:
        failures.append(f"node {refs[ref][:12]}: its measuring process did not start within {READY_GRACE_S:g} s")
    if not described:
        raise DrydockError("latency: no measuring process could start (" + "; ".join(failures) + ")")
    for failure in failures:
        log(f"latency: left out {failure}")
    return described


def _run_queue(ray, actor_error: type[BaseException], actors: dict[str, Any], described: dict[str, dict[str, Any]],
               students: Mapping[str, Path], log: Callable[[str], None], teacher: Path | None, store: WorkStore | None,
               out: Timings) -> None:
    """The teacher first on every node, then the students from one queue, one call at a time
    per node (two while its teacher runs, so no node idles between the two)."""
    queue = deque(students)
    tries: Counter[str] = Counter()
    inflight: dict[Any, tuple[str, str]] = {}  # ObjectRef → (node_id, key)
    alive = set(actors)
    teacher_pending: set[str] = set()

    def submit(node_id: str, key: str) -> None:
        path = teacher if key == TEACHER else students[key]
        assert path is not None  # the teacher is queued only when there is one
        address, location = _address(path, store)
        inflight[actors[node_id].measure.remote(address, location)] = (node_id, key)
        tries[key] += key != TEACHER

    def feed() -> None:
        for node_id in sorted(alive):
            busy = sum(1 for n, _ in inflight.values() if n == node_id)
            while queue and busy < (2 if node_id in teacher_pending else 1):
                submit(node_id, queue.popleft())
                busy += 1

    if teacher is not None:
        for node_id in sorted(alive):
            submit(node_id, TEACHER)
            teacher_pending.add(node_id)
    feed()
    while inflight:
        [ref], _ = ray.wait(list(inflight), num_returns=1)
        node_id, key = inflight.pop(ref)
        if key == TEACHER:
            teacher_pending.discard(node_id)
        host = described[node_id]["host"]
        try:
            m = Measurement.model_validate(_get(ray, ref))
        except actor_error as e:  # the node (or its process) is gone: its students go to the others, once
            if node_id in alive:
                alive.discard(node_id)
                log(f"latency: node {host} ({node_id[:12]}) lost ({_failure(e)[:200]})")
            if key != TEACHER and tries[key] < 2 and alive:
                queue.appendleft(key)
            elif key != TEACHER:
                out.errors[key] = f"measuring node lost: {_failure(e)}"
        except DrydockError:
            raise
        except Exception as e:  # noqa: BLE001 — a broken student must not hide the others' figures
            name = f"{TEACHER}@{node_id}" if key == TEACHER else key
            out.errors[name] = _failure(e)
            log(f"latency: {key} on {host}: could not be measured ({out.errors[name][:200]})")
        else:
            if key == TEACHER:
                out.teachers[m.node_id] = m
            else:
                out.students[key] = m
            _logged(log, key, m, f" on {host}")
        feed()
    for key in queue:  # every node was lost
        out.errors[key] = "no measuring node left"


def _address(path: Path, store: WorkStore | None) -> tuple[str, str | None]:
    """How a measuring node reaches a model of this node (`WorkStore.address`: the node may not
    see this one's disk), and the work location to fetch it from when that address is a URI."""
    if store is None:
        return str(path), None
    address = store.address(path)
    return address, (store.location if address != str(path) else None)


# ----------------------------------------------------------------------------------------------
# latency.json and the results columns
# ----------------------------------------------------------------------------------------------


def save_record(sweep_dir: Path, record: LatencyRecord) -> Path:
    path = sweep_dir / LATENCY_FILE
    record = record.model_copy(update={"measured_at": record.measured_at or datetime.now(UTC).isoformat(timespec="seconds")})
    return atomic_write(path, record.model_dump_json(indent=2))


def load_record(sweep_dir: Path) -> LatencyRecord | None:
    path = sweep_dir / LATENCY_FILE
    if not path.is_file():
        return None
    try:
        return LatencyRecord.model_validate(json.loads(path.read_text()))
    except (ValueError, TypeError) as e:
        raise DrydockError(f"{path}: not a latency record written by drydock ({type(e).__name__})") from None


def fill_latency(frame: pd.DataFrame, students: Mapping[str, Measurement], teachers: Mapping[str, Measurement],
                 speedups: Mapping[str, float] | None = None) -> pd.DataFrame:
    """results.parquet's latency_ms, latency_p90_ms, speedup and latency_device, by trial_id
    (others: null). `teachers` maps a node id to the teacher timed there: a student's speedup
    is its own node's teacher p50 over its p50, and null when its node timed no teacher, unless
    `speedups` gives it (the within-round ratios of an interleaved timing: `pipeline.measure.eager`)."""
    speedups = speedups or {}
    frame = frame.copy()
    by_trial = frame["trial_id"].astype(str)

    def figure(value: Callable[[Measurement], Any], empty: Any = np.nan):
        return by_trial.map(lambda t: value(students[t]) if t in students else empty)

    def speedup(m: Measurement) -> float:
        reference = teachers.get(m.node_id)
        return reference.p50_ms / m.p50_ms if reference is not None else np.nan

    frame["latency_ms"] = figure(lambda m: m.p50_ms).astype("float64")
    frame["latency_p90_ms"] = figure(lambda m: m.p90_ms).astype("float64")
    frame["speedup"] = by_trial.map(lambda t: speedups[t] if t in speedups and t in students
                                    else speedup(students[t]) if t in students else np.nan).astype("float64")
    device = figure(lambda m: m.device_name, None).astype("string")
    if "latency_device" in frame:
        frame["latency_device"] = device
    else:  # a table written before the column existed: in its place, after speedup
        frame.insert(list(frame.columns).index("speedup") + 1, "latency_device", device)
    return frame


def student_targets(frame: pd.DataFrame, workdir: Path, store: WorkStore | None = None) -> dict[str, Path]:
    """trial_id → export folder on this node, for finished trials whose folder exists (relative
    paths are taken from the work directory; a URI of the work location is fetched)."""
    targets: dict[str, Path] = {}
    finished = frame[(frame["status"] == "finished").fillna(False) & frame["student_path"].notna()]
    for _, row in finished.iterrows():
        path = store.localize(str(row["student_path"])) if store is not None else Path(str(row["student_path"]))
        path = path if path.is_absolute() else workdir / path
        if (path / "config.json").is_file():
            targets[str(row["trial_id"])] = path
    return targets


def card_latency(frame: pd.DataFrame, students: dict[str, Path], measured: dict[str, Measurement]) -> None:
    """Each timed export's model card gets its latency. The registry logs the card from this
    folder; with a work location's URI, the card in the store keeps "not measured" (the report
    and the version's tags have the figures)."""
    from pipeline.prepare.model_card import write_card

    speedups = dict(zip(frame["trial_id"].astype(str), frame["speedup"]))
    for trial_id, measurement in measured.items():
        if trial_id in students:
            write_card(students[trial_id], measurement, speedup=speedups.get(trial_id))
