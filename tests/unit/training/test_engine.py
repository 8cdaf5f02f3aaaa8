"""GPU settings judged before any work: what a CPU machine can check of them."""

from __future__ import annotations

import pytest

from pipeline.config import spec_from_dict
from pipeline.errors import SpecError
from pipeline.training.engine import native_bf16

SMOKE = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
         "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}}}


def resources(**given) -> dict:
    return {**SMOKE, "resources": given}


@pytest.mark.parametrize(("capability", "native"), [
    ((6, 0), False),  # P100
    ((7, 0), False),  # V100: is_bf16_supported() says True through emulation
    ((7, 5), False),  # T4: the same
    ((8, 0), True),   # A100
    ((8, 9), True),   # L4
    ((9, 0), True),   # H100 / H200
])
def test_bf16_auto_means_bf16_in_hardware(capability, native):
    assert native_bf16(capability) is native


@pytest.mark.parametrize("gpus", [0.5, 1.5])
def test_ranks_of_one_trial_never_share_a_gpu(gpus):
    with pytest.raises(SpecError) as info:
        spec_from_dict(resources(use_gpu=True, workers_per_trial=2, gpus_per_worker=gpus))
    (problem,) = info.value.problems
    assert problem.startswith("resources.gpus_per_worker: ")
    assert f"{gpus:g} GPUs per worker" in problem and "NCCL" in problem


def test_a_fraction_of_a_gpu_is_fine_for_one_worker_and_meaningless_on_the_cpu():
    one = spec_from_dict(resources(use_gpu=True, workers_per_trial=1, gpus_per_worker=0.5)).resources
    assert one.gpus_per_worker == 0.5  # trials share a GPU; no NCCL between them
    cpu = spec_from_dict(resources(use_gpu=False, workers_per_trial=2, gpus_per_worker=0.5)).resources
    assert cpu.workers_per_trial == 2
    two = spec_from_dict(resources(use_gpu=True, workers_per_trial=2, gpus_per_worker=2)).resources
    assert two.gpus_per_worker == 2


def test_deepspeed_is_told_the_device_ray_gave_the_rank_not_its_local_rank():
    """A worker owning GPUs {2, 3} is local rank 1 but trains on cuda:2 (Ray's device): the
    student must land there too, with the batches and the teacher (issue #35, item 1)."""
    import torch

    from pipeline.training.engine import deepspeed_device_args

    assert deepspeed_device_args(torch.device("cuda:2")).device_rank == 2
    assert deepspeed_device_args(torch.device("cuda", 0)).device_rank == 0
    assert deepspeed_device_args(torch.device("cpu")) is None  # one device: DeepSpeed's own rule holds


def test_the_installed_deepspeed_takes_the_device_from_args_before_local_rank():
    """The contract the fix above relies on, read from the installed DeepSpeed (no GPU here to
    show it): `_set_distributed_vars` takes `args.device_rank` when args has one, and
    `initialize` hands `args` to the engine."""
    import inspect

    from deepspeed.runtime.engine import DeepSpeedEngine

    source = inspect.getsource(DeepSpeedEngine._set_distributed_vars)
    assert "args.device_rank if args is not None and hasattr(args, 'device_rank') else self.local_rank" in source
    assert "get_accelerator().set_device(device_rank)" in source


@pytest.mark.parametrize("gpus", [2, 0.5])
def test_zero_3_takes_one_gpu_per_worker(gpus):
    """zero.Init partitions onto cuda:LOCAL_RANK, which is another worker's GPU when a worker owns two."""
    with pytest.raises(SpecError) as info:
        spec_from_dict(resources(use_gpu=True, workers_per_trial=1, gpus_per_worker=gpus, strategy="deepspeed",
                                 deepspeed={"zero_stage": 3}))
    (problem,) = info.value.problems
    assert problem.startswith(f"resources.gpus_per_worker: {gpus:g} GPUs per worker under ZeRO-3")
    for fine in ({"strategy": "deepspeed", "deepspeed": {"zero_stage": 2}}, {"strategy": "ddp"}):
        assert spec_from_dict(resources(use_gpu=True, workers_per_trial=1, gpus_per_worker=gpus, **fine)).resources.gpus_per_worker == gpus
