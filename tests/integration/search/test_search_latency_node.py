"""The search's latency on cuda when the sweep's driver has no GPU (a cluster's CPU-only head):
each timing runs as a Ray task holding one GPU, on a GPU node, reading the export through the
work location. Shown on a simulated cluster: the "GPU" node is one whose Ray resources say so,
and the timing itself runs on its CPU (`on_gpu_node=True` with `device: cpu`)."""

from __future__ import annotations

import pytest

from pipeline.config import LatencyConfig
from pipeline.search.search_latency import SearchLatency
from pipeline.storage import WorkStore
from tests.conftest import make_tiny_bert

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_driver_without_a_gpu_times_each_architecture_on_a_gpu_node_from_the_store(tmp_path, monkeypatch):
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "driver-cache"))
    store = WorkStore.open((tmp_path / "bucket").as_uri())
    for depth in (1, 8):  # 8 layers: far enough apart that a tiny model's timing noise cannot swap them
        make_tiny_bert(num_layers=depth).save_pretrained(store.path(f"trials/kd-{depth}/student"))
        store.push(f"trials/kd-{depth}/student")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    gpu_node = cluster.add_node(num_cpus=1, num_gpus=1, env_vars={"DRYDOCK_CACHE_DIR": str(tmp_path / "gpu-node-cache")})
    cluster.wait_for_nodes()
    try:
        ray.init(address=cluster.address)
        settings = LatencyConfig(batch_size=4, seq_length=16, shapes=["4x16"], min_runs=3, min_seconds=0.2, warmup=1, threads=1)
        latency = SearchLatency(store, "trials", settings, window_s=0.1, on_gpu_node=True)
        shallow = latency.of_folder(store.path("trials/kd-1/student"))
        deep = latency.of_folder(store.path("trials/kd-8/student"))
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert 0 < shallow < deep
    assert latency.timed_on == {gpu_node.node_id}  # every timing on the node with the GPU, none here
    fetched = list((tmp_path / "gpu-node-cache").rglob("trials/kd-*/student/config.json"))
    assert len(fetched) == 2  # that node read both exports through the work location
