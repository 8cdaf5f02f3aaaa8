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

ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, object_store_memory=96 * 2**20, log_to_driver=False)
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
