"""A Train run whose workers have no node yet waits for one, as on a cluster that is still scaling.

A Ray cluster on this machine (ray.cluster_utils.Cluster) starts with a head of 0 CPUs and no
worker node; a node with the one CPU the run needs joins seconds after the run asked for it.
Ray Train's own limit on one wait for the workers is set far lower than that (1 s, standing in
for its 60 s default against the minutes an autoscaler needs). With only that limit, Ray gives up
on the request before the node joins, asks again, and after drydock's bounded retries the run
fails (`WorkerGroupStartupTimeoutError`); with `resources.start_patience_s` it keeps waiting, runs
on the late node and reports (docs/stack-facts.md, "worker-start-timeout").
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

RAY_LIMIT_S = "1"  # Ray's own limit for one wait, in every process of the cluster
JOIN_AFTER_S = 5.0  # the node joins this long after the run asked for its workers: 5 times Ray's limit
PATIENCE_S = 60.0


def answer_on_this_node(config: dict[str, Any]) -> None:
    """The Train worker: one report that says what it computed and on which node it ran."""
    import ray
    import ray.train

    ray.train.report({"answer": config["question"] * 2, "node": ray.get_runtime_context().get_node_id()})


def test_a_run_waits_for_a_node_that_joins_late_and_reports_from_it(tmp_path, monkeypatch):
    import ray
    from ray.cluster_utils import Cluster
    from ray.util import placement_group_table

    from pipeline.search.trainer import START_TIMEOUT_VARIABLE, TrainResources, run_train

    if ray.is_initialized():
        ray.shutdown()
    with socket.socket() as s:  # another Ray instance on this machine may hold the default port
        s.bind(("127.0.0.1", 0))
        dashboard_port = s.getsockname()[1]
    # Set before the cluster starts: every Ray process inherits them. The State API address keeps
    # Train's placement-group cleaner asking this cluster, not another one on the machine
    # (docs/search-on-ray.md, "The State API must be up").
    for name, value in {START_TIMEOUT_VARIABLE: RAY_LIMIT_S, "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
                        "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0", "RAY_TRAIN_ENABLE_STATE_TRACKING": "0",
                        "RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{dashboard_port}"}.items():
        monkeypatch.setenv(name, value)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": True, "dashboard_port": dashboard_port})
    got: list[dict[str, Any]] = []
    ended: dict[str, Any] = {}

    def run() -> None:  # in a thread, as in a Tune trial: Ray adds nodes from the main thread only
        resources = TrainResources(num_workers=1, use_gpu=False, cpus_per_worker=1.0, gpus_per_worker=1.0,
                                   max_failures=0, start_patience_s=PATIENCE_S)
        ended["failure"] = run_train(answer_on_this_node, {"question": 21}, resources, name="late-node",
                                     storage_path=str(tmp_path / "train"), on_report=got.append)
        ended["at"] = time.monotonic()

    try:
        ray.init(address=cluster.address, logging_level="ERROR")
        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        # Each request for the workers is a placement group; Ray makes a new one each time it gave
        # up waiting. The node joins JOIN_AFTER_S after the first one. A run that gave up already
        # (the 1 s limit alone) is left to end before the node joins, so the outcome never
        # depends on how fast the retries run on a busy machine.
        while not placement_group_table() and runner.is_alive():
            time.sleep(0.1)
        asked = time.monotonic()
        time.sleep(JOIN_AFTER_S)
        requests = len(placement_group_table())
        if requests != 1:
            runner.join(timeout=PATIENCE_S)
        joined = time.monotonic()
        late_node = cluster.add_node(num_cpus=1)
        runner.join(timeout=PATIENCE_S + 30)
    finally:
        ray.shutdown()
        cluster.shutdown()

    assert ended, "the run did not end"
    assert ended["failure"] is None, f"the run was recorded as failed while it waited for the node: {ended['failure']!r}"
    assert requests == 1, f"Ray gave up waiting for the workers and asked again ({requests} requests)"
    assert joined - asked >= JOIN_AFTER_S and ended["at"] > joined  # it waited for the late node
    assert [(r["answer"], r["node"]) for r in got] == [(42, late_node.node_id)]  # and ran there, once
    assert os.environ[START_TIMEOUT_VARIABLE] == RAY_LIMIT_S  # this process's own value is back
