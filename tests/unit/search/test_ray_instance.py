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
