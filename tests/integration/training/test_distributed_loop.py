"""The loop under DDP and DeepSpeed (ZeRO 1 and 2) with 1 and 2 gloo processes, without Ray.

Ray adds ~10 s of start-up per trial, so the strategy x workers matrix runs here on plain
torch.distributed processes; tests/integration/search/test_sweep.py runs DeepSpeed through Ray once.
After training, every rank must hold the same weights (the gradients were all-reduced), and a
1-process DeepSpeed run must match the plain loop's first step.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.config import TrainConfig
from pipeline.training import engine, loop


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, strategy: str, zero_stage: int, port: int, out: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
                       "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "DS_ACCELERATOR": "cpu"})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from tests.contract.test_method_contract import _Task, tiny_dataset
        from tests.unit.training.test_loop import kd_method

        method = kd_method()
        result = loop.run(
            method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(),
            train=TrainConfig(max_steps=4, batch_size=8, learning_rate=1e-3, eval_every=2, progress_bar=False),
            seed=0, dist=engine.Distributed(strategy=strategy, world_size=world, rank=rank, zero_stage=zero_stage),
        )
        flat = torch.cat([p.detach().flatten() for p in method.model.parameters()])
        shm_op = None
        if strategy == "deepspeed":
            from deepspeed.comm import comm as ds_comm

            shm_op = ds_comm.cdb.shm_comm_op  # never built on the CPU (engine.skip_cpu_shm_build)
        torch.save({"params": flat, "steps": result.steps, "loss": result.history[-1]["loss/total"],
                    "shm_op_built": shm_op is not None}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("strategy,zero_stage,world", [
    ("ddp", 0, 2), ("deepspeed", 1, 1), ("deepspeed", 1, 2), ("deepspeed", 2, 1), ("deepspeed", 2, 2),
])
def test_ranks_end_with_identical_weights(tmp_path, strategy, zero_stage, world):
    out = str(tmp_path / "result")
    mp.spawn(_worker, args=(world, strategy, zero_stage, _free_port(), out), nprocs=world, join=True)
    results = [torch.load(f"{out}.{r}", weights_only=True) for r in range(world)]
    assert all(r["steps"] == 4 for r in results)
    assert not any(r["shm_op_built"] for r in results)
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in results)
    for other in results[1:]:
        torch.testing.assert_close(other["params"], results[0]["params"], atol=1e-6, rtol=1e-5)


def _diverging_worker(rank: int, world: int, port: int, out: str) -> None:
    """Rank 1's loss turns NaN at step 2; rank 0's stays finite."""
    import datetime

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.set_num_threads(1)
    # a short timeout, so that a rank left waiting in an all-reduce fails the test instead of hanging it
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=20))
    try:
        from tests.contract.test_method_contract import _Task, tiny_dataset
        from tests.unit.training.test_loop import kd_method

        method = kd_method()
        real_loss = type(method).loss

        def loss(self, batch, progress):
            terms = real_loss(self, batch, progress)
            return {k: v * float("nan") for k, v in terms.items()} if rank == 1 and progress.step == 2 else terms

        type(method).loss = loss
        try:
            loop.run(
                method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(),
                train=TrainConfig(max_steps=6, batch_size=8, learning_rate=1e-3, eval_every=3, progress_bar=False),
                seed=0, dist=engine.Distributed(strategy="ddp", world_size=world, rank=rank),
            )
            outcome = "finished"
        except loop.TrainingDiverged as e:
            outcome = f"diverged: {e}"
        except Exception as e:  # what a rank left behind would see: the backend's timeout or a closed peer
            outcome = f"{type(e).__name__}: {e}"
        with open(f"{out}.{rank}", "w") as f:
            f.write(outcome)
    finally:
        dist.destroy_process_group()


def test_a_loss_that_diverges_on_one_rank_stops_every_rank_at_that_step(tmp_path):
    """Without an agreed check, rank 0 would carry on into the next all-reduce and wait there for
    rank 1, which has stopped: a crash after the backend's timeout instead of a divergence."""
    out = str(tmp_path / "outcome")
    mp.spawn(_diverging_worker, args=(2, _free_port(), out), nprocs=2, join=True)
    rank0, rank1 = (open(f"{out}.{r}").read() for r in range(2))
    assert rank0 == "diverged: loss is not finite at step 2 (phase finetune) on rank 1", rank0
    assert rank1.startswith("diverged: loss is not finite at step 2 (phase finetune) on rank 1: "), rank1
    assert "total=nan" in rank1
