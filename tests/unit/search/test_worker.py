"""`use_gpu` and a Train worker that sees no CUDA: the trial fails with the reason recorded, and
every rank ends, whichever rank found the problem.

Only rank 0 writes a trial's outcome. A rank k != 0 that stopped alone left nothing recorded,
and a rank that stopped alone (any rank) left the others blocked in their first collective until
the backend's timeout (NCCL's: 30 minutes, then Train retried the trial). Two gloo processes
stand in for a trial's two Train workers: Ray's context and CUDA are faked per rank, and the
trial's data loading is replaced by its first collective.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import ray
import ray.train
import ray.train.torch
import ray.util
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.config import spec_from_dict
from pipeline.errors import DrydockError
from pipeline.search import worker
from pipeline.search.outcome import read_outcome
from pipeline.search.sealed import Sealed

WORLD = 2
BASE = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
        "resources": {"use_gpu": True, "workers_per_trial": WORLD}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_collective(*_args, **_kwargs):
    """Where the trial would load its data: every rank meets here first, then stops the test trial."""
    dist.barrier()
    raise DrydockError("reached the trial")


def _rank(rank: int, port: int, without_cuda: int | None, out: str, all_ended) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    # short: a rank left waiting in a collective fails the test instead of hanging it
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=10))
    context = SimpleNamespace(get_world_size=lambda: WORLD, get_world_rank=lambda: rank)
    config = {"spec": Sealed(spec_from_dict(BASE)), "workdir": out, "trial_dir": "trial", "deepspeed_preset": None,
              "prepared": {"data": "data-x", "tokenizer": "tokenizer-x"},
              "trial": {"method": "kd", "params": {}, "seed": 0, "config_id": "c"},
              "teacher": {"path": out, "metrics": {}, "key": "k"}}
    try:
        with mock.patch.object(ray.train, "get_context", lambda: context), \
             mock.patch.object(ray.util, "get_node_ip_address", lambda: f"10.0.0.{rank}"), \
             mock.patch.object(ray.train.torch, "get_device", lambda: torch.device("cpu")), \
             mock.patch.object(ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: f"node-{rank}")), \
             mock.patch.object(torch.cuda, "is_available", lambda: rank != without_cuda), \
             mock.patch.object(torch.cuda, "set_device", lambda _device: None), \
             mock.patch.object(worker, "fetch_inputs", _first_collective):
            worker.train_worker(config)
        ended = "returned"
    except Exception as e:  # a rank left behind: the backend's timeout or a closed peer
        ended = f"raised {type(e).__name__}: {e}"
    finally:
        all_ended.wait()  # as in Train, which shuts the process group down once every worker has ended
        dist.destroy_process_group()
    Path(f"{out}/ended.{rank}").write_text(ended)


def _run_trial(tmp_path: Path, without_cuda: int | None) -> tuple[dict, list[str]]:
    # fork: the children start with what this process has imported (spawn would import it all again)
    all_ended = mp.get_context("fork").Barrier(WORLD, timeout=60)
    ranks = mp.start_processes(_rank, args=(_free_port(), without_cuda, str(tmp_path), all_ended), nprocs=WORLD,
                               join=False, start_method="fork")
    deadline = time.monotonic() + 120
    while not ranks.join(timeout=5):
        if time.monotonic() > deadline:  # a rank left waiting: fail, never hang the suite
            for process in ranks.processes:
                process.kill()
            pytest.fail("the ranks did not all end within 120 s")
    return read_outcome(tmp_path / "trial"), [(tmp_path / f"ended.{r}").read_text() for r in range(WORLD)]


@pytest.mark.parametrize("without_cuda", [1, 0])
def test_a_rank_without_cuda_fails_the_trial_with_its_reason_and_every_rank_ends(tmp_path, without_cuda):
    outcome, ended = _run_trial(tmp_path, without_cuda)
    assert ended == ["returned", "returned"], ended  # not retried, nobody left waiting
    assert outcome is not None and outcome["status"] == "failed", outcome
    error = outcome["error"]
    assert error.startswith("resources.use_gpu: "), error
    assert f"rank {without_cuda} (10.0.0.{without_cuda})" in error and "sees no CUDA device" in error, error
    assert f"rank {1 - without_cuda} " not in error, error


def test_every_rank_with_cuda_goes_on_to_the_trial(tmp_path):
    outcome, ended = _run_trial(tmp_path, without_cuda=None)
    assert ended == ["returned", "returned"], ended
    assert outcome == {"status": "failed", "error": "reached the trial"}, outcome
