"""The local Ray instance's helpers that need no cluster: a free port, what a process sees of CUDA."""

from __future__ import annotations

import socket

from pipeline.search.ray_instance import cuda_here, free_port


def test_a_free_port_can_be_bound_at_once():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_cuda_here_names_the_host_and_torch_and_no_capability_without_a_gpu():
    import torch

    seen = cuda_here()
    assert seen["host"] == socket.gethostname() and seen["torch"] == torch.__version__
    assert seen["available"] == torch.cuda.is_available()
    assert (seen["capability"] is None) == (not seen["available"])


def _spec(bf16: str = "auto", use_gpu: bool = True):
    from pipeline.config import spec_from_dict

    return spec_from_dict({"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
                           "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
                           "train": {"bf16": bf16}, "resources": {"use_gpu": use_gpu}})


def _seen(*capabilities):
    return [{"available": True, "host": f"node{i}", "accelerator_type": name, "capability": list(c)}
            for i, (name, c) in enumerate(capabilities)]


def test_bf16_auto_is_decided_once_for_every_trial_from_every_gpu_type_of_the_cluster():
    """Each rank deciding from its own GPU, a pool of A100s and V100s trained one trial's ranks in
    two precisions (and trials in two, by where they landed): the driver decides once, and only
    a cluster whose every GPU type has bf16 in hardware gets it."""
    from pipeline.search.ray_instance import resolve_bf16

    lines: list[str] = []
    spec = resolve_bf16(_spec(), _seen(("A100", (8, 0)), ("H100", (9, 0))), None, lines.append)
    assert spec.train.bf16 == "on" and lines == ["train.bf16: auto → on (every GPU type of the cluster has bf16 in hardware: A100 8.0, H100 9.0)"]
    lines.clear()
    spec = resolve_bf16(_spec(), _seen(("A100", (8, 0)), ("V100", (7, 0))), None, lines.append)
    assert spec.train.bf16 == "off" and lines == ["train.bf16: auto → off (V100 7.0 emulates bf16, slower than float32)"]
    lines.clear()
    spec = resolve_bf16(_spec(), [], None, lines.append)  # no GPU answered (none free, an autoscaling cluster)
    assert spec.train.bf16 == "off" and "no GPU of the cluster answered" in lines[0] and "train.bf16: on" in lines[0]
    lines.clear()
    # the V100s' probe timed out: the A100s alone must not decide for them
    silent = [*_seen(("A100", (8, 0))), {"available": None, "accelerator_type": "V100", "capability": None}]
    spec = resolve_bf16(_spec(), silent, None, lines.append)
    assert spec.train.bf16 == "off" and lines[0].startswith("train.bf16: auto → off (no GPU of type V100 answered the probe")


def test_bf16_is_left_as_set_on_cpu_workers_and_when_given_and_a_resumed_run_keeps_its_decision():
    from pipeline.search.ray_instance import resolve_bf16

    lines: list[str] = []
    for given in ("on", "off"):
        assert resolve_bf16(_spec(given), _seen(("V100", (7, 0))), None, lines.append).train.bf16 == given
    # CPU workers: each decides off by itself, the same everywhere; the spec (and the teacher's cache key) stay as they were
    assert resolve_bf16(_spec(use_gpu=False), [], None, lines.append).train.bf16 == "auto"
    assert lines == []
    # the run started on A100s with `on`; resumed while only V100s are free, it keeps training in bf16
    spec = resolve_bf16(_spec(), _seen(("V100", (7, 0))), "on", lines.append)
    assert spec.train.bf16 == "on" and lines == ["train.bf16: auto → on (as this run started)"]
