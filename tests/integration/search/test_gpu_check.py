"""`use_gpu: true` on a cluster whose GPU node has no CUDA is an error before any work.

Ray hands out GPUs by count: a node started with `num_gpus=1` on this CPU machine is such a
node (Ray sets CUDA_VISIBLE_DEVICES for the task, torch here is the CPU build). Run in a fresh
process so that its Ray instance, with a GPU it does not have, is nobody else's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import ray
from pipeline.config import spec_from_dict
from pipeline.errors import DrydockError
from pipeline.search.ray_instance import check_gpu_workers
# address="local": a new instance, never a Ray cluster another test (a second pytest worker) runs on this machine

ray.init(address="local", num_cpus=1, num_gpus=1, include_dashboard=False, object_store_memory=96 * 2**20, log_to_driver=False)
base = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}}}
check_gpu_workers(spec_from_dict({**base, "resources": {"use_gpu": False}}))  # nothing to check
try:
    check_gpu_workers(spec_from_dict({**base, "resources": {"use_gpu": True}}))
    print("NO ERROR")
except DrydockError as e:
    print("ERROR", e)
ray.shutdown()
"""


def test_a_gpu_node_without_cuda_stops_the_sweep_before_any_work():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=180)
    out = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]
    assert out.startswith("ERROR resources.use_gpu: a GPU task on "), out
    assert "(CUDA_VISIBLE_DEVICES=0) sees no CUDA device: torch" in out and "built without CUDA" in out, out


SCRIPT_NO_FREE_GPU = """
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from pipeline.config import spec_from_dict
from pipeline.search import ray_instance

ray.init(address="local", num_cpus=1, num_gpus=1, include_dashboard=False, object_store_memory=96 * 2**20, log_to_driver=False)
gpu_taken = placement_group([{"GPU": 1}])  # the cluster's only GPU is in use: the probe waits for it
ray.get(gpu_taken.ready())
waited_on = []  # the refs check_gpu_workers waits on: the first is its probe's
get = ray.get
ray.get = lambda refs, **kwargs: (waited_on.append(refs), get(refs, **kwargs))[1]
ray_instance.GPU_PROBE_TIMEOUT_S = 2
logs = []
base = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}}}
ray_instance.check_gpu_workers(spec_from_dict({**base, "resources": {"use_gpu": True}}), log=logs.append)
ray.get = get
print("LOG", *logs)
remove_placement_group(gpu_taken)  # the GPU frees up: a probe still queued takes it now
try:
    get(waited_on[0], timeout=120)
    print("PROBE RAN")
except ray.exceptions.TaskCancelledError:
    print("PROBE CANCELLED")
ray.shutdown()
"""


def test_a_gpu_probe_that_times_out_is_cancelled_and_says_so():
    """After its timeout, the probe must not stay queued in Ray: it would take a GPU from the
    trials when one frees up. The sweep goes on (the GPUs may all be busy, or not there yet on an
    autoscaling cluster); each trial checks CUDA on its own workers."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT_NO_FREE_GPU], cwd=ROOT, capture_output=True, text=True, timeout=180)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("LOG", "PROBE"))]
    assert proc.returncode == 0 and len(lines) == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    log, probe = lines
    assert probe == "PROBE CANCELLED", probe
    assert log == ("LOG search: no GPU of the cluster answered the CUDA probe within 2 s (none was free, or CUDA "
                   "hangs on the node that took it); the probe was cancelled, and each trial checks CUDA on its "
                   "workers instead"), log
