"""A Ray cluster of a head and two worker "nodes" on this machine (ray.cluster_utils.Cluster):
the smoke sweep runs against it with an address, trials land on both nodes, the storage is the
shared work directory, and killing one node mid-sweep still ends with every trial finished
(Ray Train retries the lost trial on the surviving node)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from pipeline.config import load_spec

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.ray


def test_sweep_on_a_two_node_cluster_survives_losing_a_node(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    from pipeline.sweep import run_sweep

    if ray.is_initialized():
        ray.shutdown()
    # the dashboard gives Train the State API it needs to free a lost trial's workers (docs/search-on-ray.md, "The State API must be up")
    # on a free port: another Ray instance on this machine (a second pytest worker) may hold 8265
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dashboard_port = s.getsockname()[1]
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": True, "dashboard_port": dashboard_port}
    )
    node_a = cluster.add_node(num_cpus=1, resources={"node_a": 1})
    node_b = cluster.add_node(num_cpus=1, resources={"node_b": 1})
    cluster.wait_for_nodes()
    spec = load_spec(ROOT / "sweeps" / "smoke.yaml", [
        "name=multinode", "methods={kd: {alpha: {grid: [0.2, 0.4, 0.6, 0.8]}}}", "search.scheduler=fifo",
        "search.max_failures=2", "train.epochs=2",
    ])
    trials_root = tmp_path / "multinode" / "runs"
    killed: dict[str, str] = {}

    def kill_node_b_after_it_finished_a_trial() -> None:
        deadline = time.time() + 400
        while time.time() < deadline and not killed:
            for outcome in trials_root.glob("*/trials/*/outcome.json"):
                if json.loads(outcome.read_text()).get("node_id") == node_b.node_id:
                    killed["after"] = outcome.parent.name
                    cluster.remove_node(node_b, allow_graceful=False)
                    return
            time.sleep(0.5)

    killer = threading.Thread(target=kill_node_b_after_it_finished_a_trial, daemon=True)
    killer.start()
    try:
        frame = run_sweep(spec, tmp_path, address=cluster.address, log=lambda _: None)
    finally:
        killer.join(timeout=5)
        ray.shutdown()
        cluster.shutdown()
    assert killed, "no trial ran on node B (the second worker node)"
    assert len(frame) == 4 and set(frame["status"]) == {"finished"}, frame[["trial_id", "status", "error"]].to_dict("records")
    # node B ran a trial to the end (the killer saw its outcome); the survivors ran on node A.
    # A trial whose driver died with node B may have been re-run there, so its outcome can now
    # name node A: only "A is among the final nodes" is certain.
    outcomes = [json.loads(p.read_text()) for p in trials_root.glob("*/trials/*/outcome.json")]
    nodes = {o["node_id"] for o in outcomes}
    assert node_a.node_id in nodes and nodes <= {node_a.node_id, node_b.node_id}
    # every student sits in the shared work directory, where the driver verified and read it
    assert all(Path(p, "config.json").is_file() for p in frame["student_path"])
