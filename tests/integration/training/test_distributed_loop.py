"""The loop under DDP and DeepSpeed (ZeRO 1 and 2) with 1 and 2 gloo processes, without Ray.

Ray adds ~10 s of start-up per trial, so the strategy x workers matrix runs here on plain
torch.distributed processes; tests/integration/search/test_sweep.py runs DeepSpeed through Ray once.
After training, every rank must hold the same weights (the gradients were all-reduced), and a
1-process DeepSpeed run must match the plain loop's first step.

Why the cases share their processes: a spawned process spends ~10 s of CPU importing torch,
transformers, DeepSpeed and the test helpers (`python -c "import tests.contract.test_method_contract"`:
10.4 s wall, 9.4 s user) before it trains its 4 tiny steps, so a fresh pair of processes per case
cost more than the training. `run_batch` runs cases one after another in one spawn, in one
process group: here one spawn for the matrix's 2-process cases and one for its 1-process cases
(those the session collected). Each case builds its own method and model, and its result, or the
traceback it raised, is saved apart: a case that fails fails its own test only (`CaseFailed`), and
the cases after it run in a fresh spawn. test_deepspeed_equivalence.py batches its runs the same
way. The divergence test keeps a spawn of its own: it poisons its group on purpose.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.config import TrainConfig
from pipeline.training import engine, loop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join(rank: int, world: int, port: int) -> None:
    """This spawned process as rank `rank` of a `world`-process gloo group, DeepSpeed on its CPU accelerator."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
                       "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "DS_ACCELERATOR": "cpu"})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


# a job: its key (a file name), a picklable function(rank, *args) run on every rank, its args
Job = tuple[str, Callable, tuple]


class CaseFailed(Exception):
    """A batched job raised on some rank; the message holds its traceback. Not an AssertionError,
    so that a test expected to fail an assertion (xfail raises=AssertionError) does not pass on it."""


def _run_jobs(rank: int, world: int, port: int, jobs: list[Job], folder: str) -> None:
    join(rank, world, port)
    try:
        for key, function, args in jobs:
            try:
                result = function(rank, *args)
            except BaseException:
                torch.save({"error": f"rank {rank}:\n{traceback.format_exc()}"}, f"{folder}/{key}.{rank}")
                # this process ends: mp.spawn then ends the other ranks (one may be waiting in a
                # collective this rank will never join) and run_batch starts the jobs left anew
                raise
            torch.save({"result": result}, f"{folder}/{key}.{rank}")
            dist.barrier()  # every rank starts the next job together
    finally:
        dist.destroy_process_group()


def run_batch(jobs: list[Job], world: int, folder: Path) -> dict[str, list | CaseFailed]:
    """Runs `jobs` in order on `world` spawned processes, one spawn for all of them, and returns
    each job's results (one per rank) or, where it raised, a CaseFailed with its traceback. After
    a failure the jobs left run in a fresh spawn, so a failing job takes no other down with it."""
    outcomes: dict[str, list | CaseFailed] = {}
    pending = list(jobs)
    while pending:
        try:
            mp.spawn(_run_jobs, args=(world, free_port(), pending, str(folder)), nprocs=world, join=True)
            stopped = None
        except Exception as e:  # a rank raised or died: the job it was in has failed
            stopped = e
        finished = 0
        for key, _, _ in pending:
            paths = [folder / f"{key}.{rank}" for rank in range(world)]
            saved = [torch.load(p, weights_only=True) if p.exists() else {} for p in paths]
            finished += 1
            if all("result" in s for s in saved):
                outcomes[key] = [s["result"] for s in saved]
                continue
            # the first job without every rank's result: where the spawn stopped (those after it did not start)
            errors = [s["error"] for s in saved if "error" in s]
            outcomes[key] = CaseFailed(f"{key} failed in its batch:\n" + ("\n".join(errors) or f"no result: {stopped}"))
            break
        pending = pending[finished:]
    return outcomes


def outcome(outcomes: dict[str, list | CaseFailed], key: str) -> list:
    """The results of job `key` on every rank; raises its CaseFailed if it failed."""
    found = outcomes[key]
    if isinstance(found, CaseFailed):
        raise found
    return found


def collected_params(request, test_name: str) -> list[dict]:
    """The parameters of each case of this module's test `test_name` that the session collected
    (all of them, or those selected by a node id or -k)."""
    return [item.callspec.params if hasattr(item, "callspec") else {}
            for item in request.session.items
            if getattr(item, "module", None) is request.module and getattr(item, "originalname", None) == test_name]


def _train_case(rank: int, world: int, strategy: str, zero_stage: int) -> dict:
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
    return {"params": flat, "steps": result.steps, "loss": result.history[-1]["loss/total"],
            "shm_op_built": shm_op is not None}


@pytest.fixture(scope="module")
def matrix(request, tmp_path_factory) -> Callable[[str, int, int], list[dict]]:
    """Each case's results per rank. On the first request for a number of processes, every
    collected case with that number runs, in one spawn; a case not collected runs on its own."""
    collected = collected_params(request, "test_ranks_end_with_identical_weights")
    outcomes: dict[str, list | CaseFailed] = {}

    def results(strategy: str, zero_stage: int, world: int) -> list[dict]:
        key = f"{strategy}-{zero_stage}-{world}"
        if key not in outcomes:
            cases = [c for c in collected if c["world"] == world and f"{c['strategy']}-{c['zero_stage']}-{world}" not in outcomes]
            cases = cases or [{"strategy": strategy, "zero_stage": zero_stage, "world": world}]
            jobs = [(f"{c['strategy']}-{c['zero_stage']}-{world}", _train_case, (world, c["strategy"], c["zero_stage"])) for c in cases]
            if key not in {job[0] for job in jobs}:
                jobs.append((key, _train_case, (world, strategy, zero_stage)))
            outcomes.update(run_batch(jobs, world, tmp_path_factory.mktemp(f"world-{world}")))
        return outcome(outcomes, key)

    return results


@pytest.mark.parametrize("strategy,zero_stage,world", [
    ("ddp", 0, 2), ("deepspeed", 1, 1), ("deepspeed", 1, 2), ("deepspeed", 2, 1), ("deepspeed", 2, 2),
])
def test_ranks_end_with_identical_weights(matrix, strategy, zero_stage, world):
    results = matrix(strategy, zero_stage, world)
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
    mp.spawn(_diverging_worker, args=(2, free_port(), out), nprocs=2, join=True)
    rank0, rank1 = (open(f"{out}.{r}").read() for r in range(2))
    assert rank0 == "diverged: loss is not finite at step 2 (phase finetune) on rank 1", rank0
    assert rank1.startswith("diverged: loss is not finite at step 2 (phase finetune) on rank 1: "), rank1
    assert "total=nan" in rank1
