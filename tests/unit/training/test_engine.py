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
