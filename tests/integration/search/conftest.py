"""Fixtures shared by the sweep tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_local():
    import ray

    from pipeline.search.ray_instance import init_ray

    init_ray(None, use_gpu=False)
    yield
    ray.shutdown()
