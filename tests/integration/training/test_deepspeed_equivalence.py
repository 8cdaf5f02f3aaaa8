"""DDP ≡ DeepSpeed on the CPU: the same seed trained with DDP and with DeepSpeed ZeRO 0/1/2 on two
gloo processes takes the same optimizer steps at the same learning rates and ends with the same
weights, with and without gradient accumulation, and for a method with two phases.

Why the tolerance (atol 1e-5, rtol 1e-4 on the weights after 4 AdamW steps at lr 1e-3): both
strategies run the same fp32 maths on the same batches; what differs is where the gradients are
averaged (DDP's bucketed all-reduce, ZeRO's reduce-scatter of flattened partitions) and so the
order of the float additions, which moves the last bits of each gradient. Adam divides by the
root of the second moment, which at step 1 turns any gradient into ±lr: a last-bit difference
in a gradient near 0 can become a difference of order lr·(δg/g) in that weight. The largest
difference measured on these runs was 1.2e-6 (MiniLM, ZeRO-1; the assertion's message prints it).
"""

from __future__ import annotations

import gc
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.config import TrainConfig
from pipeline.training import engine, loop

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(rank: int, method_name: str, strategy: str, zero_stage: int, accumulation: int, port: int, out: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
                       "WORLD_SIZE": str(WORLD), "LOCAL_WORLD_SIZE": str(WORLD), "DS_ACCELERATOR": "cpu"})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        from tests.contract.test_method_contract import _Task, make_method, tiny_dataset

        method, _ = make_method(method_name)
        train = TrainConfig(max_steps=4, batch_size=16, grad_accumulation=accumulation, learning_rate=1e-3,
                            warmup_ratio=0.25, eval_every=4, progress_bar=False)
        unlabeled = tiny_dataset(24, seed=2, labels=False) if method.unlabeled() is not None else None
        result = loop.run(
            method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(), train=train, seed=0,
            unlabeled_set=unlabeled,
            dist=engine.Distributed(strategy=strategy, world_size=WORLD, rank=rank, zero_stage=zero_stage), log_every=1,
        )
        lrs = [{k: v for k, v in row.items() if k.startswith("lr/")} for row in result.history]
        weights = {k: v.detach().clone() for k, v in method.eval_model().state_dict().items()}
        gc.collect()
        engines = sum(1 for o in gc.get_objects() if type(o).__name__ in ("DeepSpeedEngine", "DeepSpeedZeroOptimizer"))
        torch.save({"steps": result.steps, "lrs": lrs, "weights": weights, "engines_alive": engines}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def train(tmp_path, method_name: str, strategy: str, zero_stage: int, accumulation: int) -> dict:
    out = str(tmp_path / f"{method_name}-{strategy}-{zero_stage}-{accumulation}")
    mp.spawn(_train, args=(method_name, strategy, zero_stage, accumulation, _free_port(), out), nprocs=WORLD, join=True)
    ranks = [torch.load(f"{out}.{r}", weights_only=True) for r in range(WORLD)]
    for name, value in ranks[0]["weights"].items():  # every rank holds the same model
        torch.testing.assert_close(ranks[1]["weights"][name], value, atol=1e-6, rtol=1e-5)
    return ranks[0]


def assert_same_training(deepspeed: dict, ddp: dict) -> None:
    assert deepspeed["steps"] == ddp["steps"] >= 4
    assert len(deepspeed["lrs"]) == len(ddp["lrs"]) == ddp["steps"]  # one log row per optimizer step
    for got, want in zip(deepspeed["lrs"], ddp["lrs"]):
        assert got.keys() == want.keys()
        assert [got[k] for k in sorted(got)] == pytest.approx([want[k] for k in sorted(want)], rel=1e-9)
    worst = max(float((deepspeed["weights"][k] - v).abs().max()) for k, v in ddp["weights"].items())
    for name, value in ddp["weights"].items():
        torch.testing.assert_close(deepspeed["weights"][name], value, atol=1e-5, rtol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m} (largest difference over all weights {worst:.3g})")


@pytest.mark.parametrize("accumulation", [1, 2])
def test_kd_trains_alike_under_ddp_and_every_zero_stage(tmp_path, accumulation):
    ddp = train(tmp_path, "kd", "ddp", 0, accumulation)
    for stage in (0, 1, 2):
        assert_same_training(train(tmp_path, "kd", "deepspeed", stage, accumulation), ddp)


@pytest.mark.parametrize(("method_name", "stage"), [("theseus", 1), ("minilm", 1), ("cofi", 2)])
def test_a_multi_phase_method_trains_alike_and_leaves_no_engine_behind(tmp_path, method_name, stage):
    """Each phase has its own DeepSpeed engine over the same parameters: Theseus' replacing then
    successor fine-tuning, MiniLM's distillation on unlabeled text then fine-tuning, CoFi's
    distillation warm-up, pruning with Lagrange multipliers ascending, then the pruned model's
    fine-tuning. A phase's engine hangs gradient hooks on the parameters that keep it and its
    optimizer's partitions alive: it must be destroyed when its phase ends. (CoFi did not start
    under DeepSpeed before: its 0-dim λ broke DeepSpeed's start-up broadcast.)"""
    ddp = train(tmp_path, method_name, "ddp", 0, 2)
    deepspeed = train(tmp_path, method_name, "deepspeed", stage, 2)
    assert_same_training(deepspeed, ddp)
    assert deepspeed["engines_alive"] == 0


@pytest.mark.xfail(strict=True, reason=(
    "ZeRO-2 steps every parameter of its flat partitions: a Theseus successor that no rank used in "
    "a step (its gradient None under DDP, which AdamW skips) gets a zero gradient, so AdamW's "
    "momentum and weight decay still move it. ZeRO 0 and 1 skip it as DDP does. Measured: 3e-3 "
    "after 4 steps at lr 1e-3 on layer 0's successor; equal to 1e-7 when every module is used."))
def test_zero_2_leaves_a_module_no_rank_used_alone_like_ddp(tmp_path):
    ddp = train(tmp_path, "theseus", "ddp", 0, 1)
    assert_same_training(train(tmp_path, "theseus", "deepspeed", 2, 1), ddp)


def _train_bf16_and_export(rank: int, stage: int, port: int, out: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
                       "WORLD_SIZE": str(WORLD), "LOCAL_WORLD_SIZE": str(WORLD), "DS_ACCELERATOR": "cpu"})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        from pipeline.training.export import reference_logits
        from tests.conftest import make_batch
        from tests.contract.test_method_contract import _Task, make_method, tiny_dataset

        method, _ = make_method("kd")
        seen: set[torch.dtype] = set()
        train = TrainConfig(max_steps=4, batch_size=16, learning_rate=1e-3, eval_every=2, bf16="on", progress_bar=False)

        def watch(module, args):
            seen.add(next(module.parameters()).dtype)

        original_build = method.build

        def build():
            model = original_build()
            model.register_forward_pre_hook(watch)
            return model

        method.build = build
        loop.run(method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(), train=train, seed=0,
                 dist=engine.Distributed(strategy="deepspeed", world_size=WORLD, rank=rank, zero_stage=stage))
        trained_in = sorted(str(d) for d in seen)  # the forwards of training and evaluation
        if rank == 0:
            batch = make_batch(batch_size=4, seq_len=8, seed=5)
            batch.pop("labels", None)
            expected = reference_logits(method.eval_model(), batch)
            student = method.export()
            student.save_pretrained(f"{out}/student")
            torch.save({"trained_in": trained_in, "batch": batch, "expected": expected,
                        "weights": {k: v.detach().clone() for k, v in student.state_dict().items()}}, f"{out}/result.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("stage", [0, 2])  # ZeRO 0 keeps its masters in an unfused optimizer, ZeRO 1-2 map them
def test_a_bf16_deepspeed_run_exports_float32_from_its_full_precision_weights(tmp_path, stage):
    """DeepSpeed casts the module to bf16 and keeps fp32 masters of what it trains: the export
    must come from those: a bf16 export reloads in bf16, and issue 19 reports its logits missing
    the trained model's fp32 ones by more than the 1e-4 the verification allows."""
    from pipeline.training.export import verify_export

    mp.spawn(_train_bf16_and_export, args=(stage, _free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    result = torch.load(tmp_path / "result.pt", weights_only=True)
    assert result["trained_in"] == ["torch.bfloat16"]  # the forward passes ran on bf16 weights
    weights = result["weights"]
    assert {v.dtype for v in weights.values() if v.is_floating_point()} == {torch.float32}
    # full precision, not bf16 values cast up: some weight differs from its bf16 rounding
    assert max(float((v - v.bfloat16().float()).abs().max()) for v in weights.values() if v.is_floating_point()) > 0
    assert verify_export(tmp_path / "student", result["expected"], result["batch"]) <= 1e-4
