"""How many trial drivers a node takes (issue #35, item 7).

Each trial is a Tune driver actor plus the Train controller Ray pins to the driver's node
(ray/train/v2/api/data_parallel_trainer.py: a label selector on the driver's node id), about
0.83 GB resident together (`ps` on a running sweep here: 421 MB and 410 MB). Reserving no CPU and
1 byte of memory, Ray counted none of it: any number of drivers fit on any node, and a cluster's
head (8 CPUs, 32 GiB in cluster/k8s) could end up holding a driver and a controller for every
trial. Reserving the pair's memory, a node takes the drivers its memory holds and no more; the
rest go to nodes with room, or wait for one.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

GIB = 2**30


def test_a_node_takes_no_more_trial_drivers_than_its_memory_holds():
    import ray
    from ray.cluster_utils import Cluster
    from ray.tune.execution.placement_groups import resource_dict_to_pg_factory
    from ray.util import placement_group_table, remove_placement_group

    from pipeline.search.ray_instance import DRIVER_MEMORY, DRIVER_RESOURCES

    assert DRIVER_RESOURCES == {"cpu": 0, "memory": DRIVER_MEMORY} and DRIVER_MEMORY >= 0.83e9
    small = int(2.5 * GIB)  # two drivers' memory and a half
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "memory": small, "object_store_memory": 100 * 2**20})
    cluster.add_node(num_cpus=1, memory=small, object_store_memory=100 * 2**20)
    try:
        ray.init(address=cluster.address)
        cluster.wait_for_nodes()
        groups = [resource_dict_to_pg_factory(DRIVER_RESOURCES)() for _ in range(6)]  # what Tune asks, per trial
        ready, waiting = ray.wait([g.ready() for g in groups], num_returns=6, timeout=20)
        tables = [placement_group_table(g) for g in groups]
        placed = [t["bundles_to_node_id"][0] for t in tables if t["state"] == "CREATED"]
        assert (len(ready), len(waiting)) == (4, 2), placed  # two per node; the last two wait for room
        assert sorted(placed.count(n) for n in set(placed)) == [2, 2], placed
        for g in groups:
            remove_placement_group(g)
    finally:
        ray.shutdown()
        cluster.shutdown()
