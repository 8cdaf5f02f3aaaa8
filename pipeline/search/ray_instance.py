"""The Ray instance a sweep runs on: a local one sized to this machine, or a cluster's.

Every Ray process of the sweep gets the same environment (`RAY_ENV`), and a local instance gets
its own State API address: why each setting is there is in `docs/search-on-ray.md`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import ray

from pipeline.config import SweepSpec
from pipeline.errors import DrydockError

# Environment for every Ray process of the sweep. Health checks every 0.5 s instead of 2 s: reports
# reach Tune sooner and trial ends are noticed sooner (`benchmarks/sweep_overhead.py` measures the
# seconds per trial outside training); the preemption watcher and state tracking are actors we do
# not use.
RAY_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_ENABLE_STATE_TRACKING": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "PYTHONWARNINGS": "ignore::DeprecationWarning,ignore::FutureWarning,ignore::UserWarning",
    "RAY_AIR_NEW_OUTPUT": "0",
}
# Passed on from the driver's environment to every Ray process when set.
PASSED_ON = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "TORCH_EXTENSIONS_DIR", "MLFLOW_TRACKING_URI")

# Where the State API of a local instance is, for every process of it. Ray Train's placement-group
# cleaner asks the State API whether a trial's controller is alive; without an address it asks the
# instance named in /tmp/ray/ray_current_cluster, which may be another one on the machine
# (docs/search-on-ray.md; tests/integration/search/test_ray_instance.py). On a cluster the head's
# `ray start` writes that file for its own GCS, so only the local case is fixed.
API_SERVER_VARIABLE = "RAY_API_SERVER_ADDRESS"
_api_server_set: str | None = None  # the value init_ray last put into os.environ


def forget_local_instance() -> None:
    """After `ray.shutdown()` of the local instance `init_ray` started: its State API address
    leaves the environment, so a later `ray.init` in this process (the user's own, in a
    notebook) does not ask a dead dashboard."""
    global _api_server_set
    if _api_server_set and os.environ.get(API_SERVER_VARIABLE) == _api_server_set:
        del os.environ[API_SERVER_VARIABLE]
    _api_server_set = None


def init_ray(address: str | None, use_gpu: bool) -> None:
    if ray.is_initialized():
        return
    env = dict(RAY_ENV)
    if not use_gpu:
        env["DS_ACCELERATOR"] = "cpu"  # never on GPU nodes: DeepSpeed must find CUDA there
    env.update({key: os.environ[key] for key in PASSED_ON if key in os.environ})
    address = address or os.environ.get("RAY_ADDRESS")
    global _api_server_set
    if _api_server_set and os.environ.get(API_SERVER_VARIABLE) == _api_server_set:
        del os.environ[API_SERVER_VARIABLE]  # a previous local instance's, started by this process
    dashboard: dict[str, Any] = {}
    if not address:
        host, port = "127.0.0.1", free_port()
        dashboard = {"dashboard_host": host, "dashboard_port": port}
        env[API_SERVER_VARIABLE] = _api_server_set = f"http://{host}:{port}"
    os.environ.update({k: v for k, v in env.items() if k.startswith("RAY_")})
    logging.getLogger("ray").setLevel(logging.ERROR)
    verbose = os.environ.get("DRYDOCK_RAY_LOGS") == "1"
    common: dict[str, Any] = dict(runtime_env={"env_vars": env}, log_to_driver=verbose, logging_level="ERROR" if not verbose else "INFO")
    if address:
        ray.init(address=address, **common)
        return
    # Local: sized to this machine. The dashboard stays on (include_dashboard=None): without its
    # State API, Train's placement-group cleaner cannot free the workers of trials that ASHA
    # stops, and later trials time out waiting for them (docs/search-on-ray.md). Its address is
    # fixed up front and given to every process (see API_SERVER_VARIABLE).
    temp_dir = os.environ.get("DRYDOCK_RAY_TMPDIR")  # a short path: Ray's sockets live under it
    temp: dict[str, Any] = {"_temp_dir": temp_dir} if temp_dir else {}
    # Ray counts the CPUs itself: unlike os.cpu_count(), its count honours a container's quota.
    ray.init(address="local", object_store_memory=256 * 2**20, include_dashboard=None,
             **dashboard, **temp, **common)


def free_port() -> int:
    """A TCP port free on this machine now (the OS picks it; Ray binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# How long the sweep waits for a GPU of the cluster to answer whether torch sees CUDA there.
GPU_PROBE_TIMEOUT_S = 300


def cuda_here() -> dict[str, Any]:
    """What a task given a GPU sees of CUDA on its node (run as a Ray task by `check_gpu_workers`)."""
    import torch

    available = torch.cuda.is_available()
    return {"available": available, "torch": torch.__version__, "cuda": torch.version.cuda,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "host": socket.gethostname(),
            "capability": list(torch.cuda.get_device_capability(0)) if available else None,
            "name": torch.cuda.get_device_name(0) if available else None}


def check_gpu_workers(spec: SweepSpec, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """With `use_gpu`, one task on a GPU of each type the cluster has must see CUDA, before any
    work; returns what each answered (its `accelerator_type` added), which `resolve_bf16` reads.
    Ray hands out GPUs by its resource count; a node whose torch has no CUDA (a CPU build in the
    image, no driver) would otherwise train every trial on its CPU while NCCL waits for a device."""
    if not spec.resources.use_gpu or not ray.cluster_resources().get("GPU"):
        return []  # no GPU yet (an autoscaling cluster): max_concurrent has said what happens
    probe = ray.remote(num_cpus=0, num_gpus=min(1.0, spec.resources.gpus_per_worker))(cuda_here)
    # Ray gives each GPU node an `accelerator_type:<name>` resource (1 per node): one probe per
    # type reaches every kind of GPU; a node without it (a GPU count given by hand) is probed untyped
    types = sorted(k.split(":", 1)[1] for k in ray.cluster_resources() if k.startswith(ACCELERATOR_PREFIX))
    refs = {t: probe.options(resources={ACCELERATOR_PREFIX + t: 0.001}).remote() for t in types} or {None: probe.remote()}
    answers = []
    for kind, ref in refs.items():
        seen: dict[str, Any] | None
        try:
            seen = ray.get(ref, timeout=GPU_PROBE_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            seen = _cancel_probe(ref, GPU_PROBE_TIMEOUT_S, log)
            if seen is None:  # a type of unknown capability: `resolve_bf16` will not decide `on` over it
                answers.append({"available": None, "accelerator_type": kind or "a GPU", "capability": None})
                continue
        if not seen["available"]:
            raise DrydockError(
                f"resources.use_gpu: a GPU task on {seen['host']} (CUDA_VISIBLE_DEVICES={seen['visible']}) sees no CUDA "
                f"device: torch {seen['torch']} there was built {'without CUDA' if not seen['cuda'] else 'for CUDA ' + seen['cuda'] + ' but finds no driver or device'}. "
                "Run the sweep on nodes with a CUDA build of torch and a GPU driver, or set resources.use_gpu: false")
        answers.append({**seen, "accelerator_type": kind or seen.get("name") or seen["host"]})
    return answers


ACCELERATOR_PREFIX = "accelerator_type:"


def resolve_bf16(spec: SweepSpec, seen: list[dict[str, Any]], saved: str | None,
                 log: Callable[[str], None] = print) -> SweepSpec:
    """`train.bf16: auto` decided once for the whole run, on the driver, from every GPU type the
    probes reached (`check_gpu_workers`): each rank deciding from its own GPU, a mixed pool trained
    one trial's ranks, and trials by where they landed, in two precisions. A GPU without bf16 in
    hardware (compute capability < 8.0) emulates it, slower than float32, so one such type turns it
    off for all. `saved`: the decision a resumed run started with (its spec.json), which it keeps.
    CPU workers all decide `off` by themselves: the spec, and the teacher's cache key, stay."""
    if spec.train.bf16 != "auto" or not spec.resources.use_gpu:
        return spec
    from pipeline.training.engine import native_bf16

    if saved in ("on", "off"):
        decision, why = saved, "as this run started"
    elif not seen or any(s["capability"] is None for s in seen):
        silent = sorted({s["accelerator_type"] for s in seen if s["capability"] is None})
        decision, why = "off", (f"no GPU{' of type ' + ', '.join(silent) if silent else ' of the cluster'} answered the probe, "
                                "so whether it has bf16 is unknown; set train.bf16: on to train in bf16 on GPUs that have it")
    else:
        kinds = {(s["accelerator_type"], tuple(s["capability"])) for s in seen}
        named = ", ".join(f"{name} {c[0]}.{c[1]}" for name, c in sorted(kinds))
        slow = ", ".join(f"{name} {c[0]}.{c[1]}" for name, c in sorted(kinds) if not native_bf16(c))
        decision = "off" if slow else "on"
        why = f"{slow} emulates bf16, slower than float32" if slow else f"every GPU type of the cluster has bf16 in hardware: {named}"
    log(f"train.bf16: auto → {decision} ({why})")
    return spec.model_copy(update={"train": spec.train.model_copy(update={"bf16": decision})})


def _cancel_probe(ref: ray.ObjectRef, waited_s: float, log: Callable[[str], None]) -> dict[str, Any] | None:
    """Cancel a probe that did not answer in time: still queued, it would take a GPU from the trials
    when one frees up; running, its CUDA call hangs. What it saw if it answered meanwhile, else None.

    `ray.cancel(force=True)`: a queued task never runs, a running one's worker is killed; `ray.get`
    raises TaskCancelledError for both alike in Ray 2.60, so the message names both."""
    ray.cancel(ref, force=True)
    try:
        return ray.get(ref, timeout=60)
    except ray.exceptions.RayError:  # cancelled (or, not even answering the cancel, GetTimeoutError)
        pass
    log(f"search: no GPU of the cluster answered the CUDA probe within {waited_s:g} s (none was free, or CUDA hangs "
        "on the node that took it); the probe was cancelled, and each trial checks CUDA on its workers instead")
    return None


# A trial's driver and the Train controller Ray pins to its node hold about 0.83 GB between them
# (421 + 410 MB resident, measured): reserved, a cluster's head takes the drivers its memory holds
# and the rest go to nodes with room; reserving none (Tune rejects {"cpu": 0} alone), Ray counted
# none of it (tests/integration/search/test_driver_placement.py). No CPU: a fraction of one can
# deadlock two workers on two CPUs, and the driver mostly waits.
DRIVER_MEMORY = 2**30
DRIVER_RESOURCES: dict[str, float] = {"cpu": 0, "memory": DRIVER_MEMORY}


def max_concurrent(spec: SweepSpec, log: Callable[[str], None] = print, resources: dict[str, float] | None = None) -> int:
    """How many trials run at once: as many as the cluster holds now, or the spec's number.

    Checked before the teacher stage, which needs one trial's resources too: a request the
    cluster cannot meet would otherwise wait (and retry) instead of saying so. `resources`:
    the cluster's (`ray.cluster_resources()` unless given)."""
    r = spec.resources
    resources = ray.cluster_resources() if resources is None else resources
    memory = resources.get("memory", 0.0)
    if memory < DRIVER_MEMORY:  # Tune would wait for ever to place the first trial's driver, saying nothing
        raise DrydockError(f"resources: a trial's driver reserves {DRIVER_MEMORY / 2**30:g} GiB of memory, but the Ray "
                           f"cluster offers {memory / 2**30:.2f} GiB (Ray counts the memory free when a node starts): "
                           "free some, or start Ray with more (`ray start --memory`)")
    kind = "GPU" if r.use_gpu else "CPU"
    if r.use_gpu:
        capacity, per_trial = resources.get("GPU", 0.0), r.workers_per_trial * r.gpus_per_worker
    else:
        capacity, per_trial = resources.get("CPU", 0.0), r.workers_per_trial * r.cpus_per_worker
    fits = int(capacity // per_trial) if per_trial else 1
    if fits > memory // DRIVER_MEMORY:
        log(f"search: the Ray cluster's memory ({memory / 2**30:.1f} GiB) holds {int(memory // DRIVER_MEMORY)} trial "
            f"driver(s) of {DRIVER_MEMORY / 2**30:g} GiB, fewer than its {kind}s hold ({fits})")
        fits = int(memory // DRIVER_MEMORY)
    wanted = spec.search.max_concurrent_trials
    if wanted:
        # An autoscaling cluster may start smaller than it grows: trust the spec's number, but say
        # what happens to the trials the cluster cannot hold yet.
        if wanted > fits:
            # a trial trained in its actor waits as a pending Tune trial, without limit
            wait = ("as long as it takes (resources.trial_runner: tune-actor)" if r.trial_runner == "tune-actor"
                    else f"{_patience(r.start_patience_s)} (resources.start_patience_s) before it fails")
            log(f"search: max_concurrent_trials is {wanted}, but the Ray cluster holds {fits} trial(s) now "
                f"({capacity:g} {kind}s, {per_trial:g} per trial); the others wait for it to grow, each {wait}")
        return wanted
    if fits < 1:
        raise DrydockError(
            f"resources: a trial needs {per_trial:g} {kind}s ({r.workers_per_trial} workers), "
            f"but the Ray cluster has {capacity:g}"
        )
    return fits


def _patience(seconds: float | None) -> str:
    return "without a limit" if seconds is None else f"up to {seconds:g} s"
