"""Latency at scale on a simulated cluster (ray.cluster_utils.Cluster): a head with 0 CPUs and two
1-CPU worker nodes time a teacher and three students. Both nodes are used, each times the
teacher first, every speedup is taken against the teacher of the student's own node, and one
process per node serves all of that node's measurements. Before this, one Ray task per model
timed everything on one node, a fresh process per GPU call, and the speedup used one teacher
timing whichever node the students landed on. The runtime variants' job then runs in one actor
on one node, all its models in one process, with that node's CPUs as its threads."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from methods.base import TaskInfo
from pipeline import results as results_table
from pipeline.config import LatencyConfig
from pipeline.measure.interleaved import InterleaveSettings
from pipeline.measure.job import DevRows, VariantJob, run_variant_job
from pipeline.measure.latency import cpu_name, fill_latency, measure_all, on_one_node, plan_nodes
from pipeline.training.export import save_student
from tests.conftest import make_tiny_bert

pytestmark = [pytest.mark.ray, pytest.mark.slow]
TASK = TaskInfo(name="sst2", num_labels=2, regression=False, label_names=("negative", "positive"))
SETTINGS = LatencyConfig(batch_size=2, seq_length=8, warmup=1, min_runs=3, min_seconds=0.05)


def test_two_nodes_time_in_parallel_each_against_its_own_teacher(tmp_path, tiny_tokenizer):
    import ray
    from ray.cluster_utils import Cluster

    teacher = save_student(make_tiny_bert(4), tiny_tokenizer, tmp_path / "teacher", TASK, {"role": "teacher"})
    # three depths: students of one architecture would be timed once (`measure_all`)
    students = {f"d{i}": save_student(make_tiny_bert(1 + i, seed=i), tiny_tokenizer, tmp_path / f"d{i}", TASK, {"method": "kd"})
                for i in range(3)}
    # and three of one architecture for the variants job, which times them once too
    same = {f"s{i}": save_student(make_tiny_bert(1, seed=i), tiny_tokenizer, tmp_path / f"s{i}", TASK, {"method": "kd"})
            for i in range(3)}
    if ray.is_initialized():
        ray.shutdown()
    started = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    messages: list[str] = []
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        # the real `ray.nodes()`: the head (0 CPUs) is no place to time on
        assert {n.node_id for n in plan_nodes(ray.nodes(), SETTINGS)} == {w.node_id for w in workers}
        timings = measure_all(students, SETTINGS, messages.append, teacher=teacher)
        # the runtime variants: one actor on one node, every model and shape in its one process
        job = VariantJob(models={"teacher": str(teacher), **{k: str(p) for k, p in same.items()}}, runtimes=["torch"],
                         shapes=[(1, 8), (2, 8)], dev=DevRows(["a b c", "d e"] * 4, None, [0.0, 1.0] * 4, ["accuracy"], "accuracy",
                                                              False, 8),
                         out=str(tmp_path / "variants"), interleave=InterleaveSettings(warmup=1, min_rounds=3, min_seconds=0.05).model_dump())
        variants = on_one_node(run_variant_job, job, SETTINGS, messages.append)
    finally:
        ray.shutdown()
        cluster.shutdown()

    node_ids = {w.node_id for w in workers}
    assert timings.errors == {} and set(timings.students) == set(students)
    # the teacher was timed on each node, and both nodes timed students
    assert set(timings.teachers) == node_ids
    assert all(m.node_id == node_id for node_id, m in timings.teachers.items())
    by_node = defaultdict(list)
    for key, m in timings.students.items():
        by_node[m.node_id].append(key)
    assert set(by_node) == node_ids, by_node
    # one process per node served the teacher and all of that node's students
    for node_id, keys in by_node.items():
        assert {timings.students[k].pid for k in keys} == {timings.teachers[node_id].pid}
    assert timings.teachers[workers[0].node_id].pid != timings.teachers[workers[1].node_id].pid
    assert max(len(keys) for keys in by_node.values()) == 2  # three students, two nodes: one served three models
    # every figure says where: the device model, and the node's whole CPU count as threads
    for m in [*timings.teachers.values(), *timings.students.values()]:
        assert m.device_name == cpu_name() and m.threads == 1 and m.hostname and m.p50_ms > 0

    # each speedup is its own node's teacher over the student
    rows = [results_table.trial_row(key, "kd", 0, {}, "finished", {"metric": 0.5}) for key in students]
    frame = fill_latency(results_table.to_frame(rows), timings.students, timings.teachers).set_index("trial_id")
    for key, m in timings.students.items():
        assert frame.loc[key, "speedup"] == timings.teachers[m.node_id].p50_ms / m.p50_ms
        assert frame.loc[key, "latency_device"] == cpu_name()
    assert any("3 models on 2 node(s)" in line and "the teacher timed on each" in line for line in messages), messages
    assert variants.threads == 1 and [f.error for f in variants.facts] == [None] * 4  # the node's one CPU
    assert {f.trial_id for f in variants.facts} == {"teacher", *same}
    for result in variants.measurements.values():  # s1 and s2 have s0's architecture: one timing
        timings_ = result.timings
        assert timings_["s1/torch"].measured_as == timings_["s2/torch"].measured_as == "s0/torch"
        assert result.speedups["s0/torch"]["teacher/torch"].median > 0
    assert list(variants.measurements) == ["1x8", "2x8"]
    assert any(line.startswith("variants: on node") for line in messages) and any("2x8: timing 2 runner(s)" in line for line in messages)
    # no wait on an actor that never starts (READY_GRACE_S) or a node that never frees: the cluster's
    # start included, well under 30 s alone; 83 s seen in a full suite with other work on both cores
    assert time.monotonic() - started < 150
