"""Latency measurement on tiny models in-process (Ray not started), and the planning of a
measurement under Ray on plain `ray.nodes()`-shaped data (the cluster itself:
tests/integration/measure/test_latency_cluster.py)."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

from methods.base import TaskInfo
from pipeline import results as results_table
from pipeline.config import LatencyConfig
from pipeline.errors import DrydockError
from pipeline.measure.interleaved import MAX_SECONDS_FACTOR, median_interval, median_is_stable
from pipeline.measure.latency import (
    LatencyRecord,
    Measurement,
    cpu_name,
    fill_latency,
    load_record,
    measure_all,
    measure_folder,
    plan_nodes,
    representative_teacher,
    same_device_model,
    save_record,
    time_alone,
)
from pipeline.training.export import save_student
from tests.conftest import make_tiny_bert

TASK = TaskInfo(name="sst2", num_labels=2, regression=False, label_names=("negative", "positive"))
# Big enough that 8 layers vs 1 is a clear gap on a busy 2-core machine; one thread keeps the
# timing steady when the other core is taken.
WIDE = {"hidden_size": 256, "num_heads": 4, "intermediate_size": 1024, "max_position_embeddings": 128}
SETTINGS = LatencyConfig(batch_size=16, seq_length=128, threads=1, warmup=1, min_runs=5, min_seconds=0.3)


@pytest.fixture(scope="module")
def wide_students(tmp_path_factory, tiny_tokenizer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("latency")
    return {
        f"layers{n}": save_student(make_tiny_bert(n, **WIDE), tiny_tokenizer, root / f"layers{n}", TASK, {"method": "finetune"})
        for n in (1, 8)
    }


def test_deeper_model_is_slower_and_figures_are_consistent(wide_students):
    import os

    timings = measure_all({"s1": wide_students["layers1"]}, SETTINGS, log=lambda _: None, teacher=wide_students["layers8"])
    assert timings.errors == {} and set(timings.teachers) == {""}  # without Ray: in this process, no node id
    slow, fast = timings.teachers[""], timings.students["s1"]
    assert timings.teacher == slow and slow.pid == fast.pid == os.getpid()
    assert fast.p50_ms > 0 and slow.p50_ms > 2 * fast.p50_ms  # 8 layers vs 1: several times the work
    for m in (slow, fast):
        assert m.p90_ms >= m.p50_ms > 0 and m.runs >= SETTINGS.min_runs
        assert m.throughput == pytest.approx(16 * 1000 / m.p50_ms)
        assert (m.batch_size, m.seq_length, m.threads, m.device, m.warmup) == (16, 128, 1, "cpu", 1)
        assert m.num_params > 0 and m.device_name == cpu_name()
        assert "1 threads" in m.description and m.torch_version in m.description
    assert slow.num_params > fast.num_params

    rows = [results_table.trial_row("s1", "finetune", 0, {}, "finished", {"metric": 0.5}),
            results_table.trial_row("s2", "finetune", 1, {}, "failed", error="boom")]
    frame = fill_latency(results_table.to_frame(rows), {"s1": fast}, timings.teachers)
    assert frame.loc[0, "latency_ms"] == fast.p50_ms and frame.loc[0, "latency_p90_ms"] == fast.p90_ms
    assert frame.loc[0, "speedup"] == pytest.approx(slow.p50_ms / fast.p50_ms) and frame.loc[0, "speedup"] > 2
    assert frame.loc[0, "latency_device"] == cpu_name()
    assert pd.isna(frame.loc[1, "latency_ms"]) and pd.isna(frame.loc[1, "speedup"]) and pd.isna(frame.loc[1, "latency_device"])
    assert list(frame.columns) == results_table.ordered_columns(list(frame.columns))


def test_timed_runs_meet_both_minimums_after_the_warmup():
    calls = []

    def model(**inputs):
        calls.append(inputs)
        time.sleep(0.002)

    settings = LatencyConfig(warmup=3, min_runs=4, min_seconds=0.05)
    started = time.perf_counter()
    times = time_alone(partial(model, input_ids=None), settings)
    assert len(calls) == 3 + len(times) and len(times) >= 4
    assert time.perf_counter() - started >= 0.05 and all(t >= 2.0 for t in times)
    assert len(time_alone(model, LatencyConfig(warmup=0, min_runs=6, min_seconds=0.001))) >= 6


def test_a_forward_that_fails_while_timed_raises_its_own_exception():
    """A caller of `time_alone` handles an out-of-memory error or a shape mistake by its type (a
    GPU's `torch.OutOfMemoryError` means a smaller batch, not a broken student), so the engine's
    record of a dropped runner must not turn it into a RuntimeError."""

    class Boom(MemoryError):
        pass

    def model(**inputs):
        raise Boom("42 GiB asked")

    with pytest.raises(Boom, match="42 GiB asked") as info:
        time_alone(model, LatencyConfig(warmup=0, min_runs=3, min_seconds=0.01), name="student")
    assert info.value.__notes__ == ["student: the forward pass failed while timed"]  # which model, still said


def test_an_unsettled_median_keeps_sampling_until_the_cap():
    durations = iter([0.001, 0.008] * 10_000)  # two modes: the median never settles

    def model(**inputs):
        time.sleep(next(durations))

    settings = LatencyConfig(warmup=0, min_runs=3, min_seconds=0.05)
    started = time.perf_counter()
    times = time_alone(model, settings)
    elapsed = time.perf_counter() - started
    assert MAX_SECONDS_FACTOR * 0.05 <= elapsed < MAX_SECONDS_FACTOR * 0.05 + 0.1
    assert not median_is_stable(times)


def test_median_stability_uses_order_statistics():
    assert median_interval(list(range(1, 101))) == (41, 61)  # n=100: ranks 40 and 60 (0-based)
    assert median_is_stable([10.0] * 20 + [100.0] * 3)  # a few hiccups do not move the median
    assert not median_is_stable([10.0, 20.0] * 10)
    assert not median_is_stable([10.0, 10.0])  # too few runs to say


def test_threads_are_restored_and_default_to_the_caller_setting(wide_students):
    import torch

    before = torch.get_num_threads()
    m = measure_folder(wide_students["layers1"], LatencyConfig(batch_size=2, seq_length=8, warmup=0, min_runs=2, min_seconds=0.01))
    assert m.threads == before and torch.get_num_threads() == before


def test_a_sequence_longer_than_the_position_table_is_a_user_error(wide_students):
    with pytest.raises(DrydockError, match=r"selection.latency.seq_length: 256 exceeds the 128 positions"):
        measure_all({"s": wide_students["layers1"]}, LatencyConfig(seq_length=256), log=lambda _: None)


def test_a_broken_student_is_recorded_and_the_others_are_measured(wide_students, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((wide_students["layers1"] / name).read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    settings = LatencyConfig(batch_size=2, seq_length=8, warmup=0, min_runs=2, min_seconds=0.01)
    timings = measure_all({"bad": broken, "good": wide_students["layers1"]}, settings, log=lambda _: None)
    assert set(timings.students) == {"good"} and set(timings.errors) == {"bad"} and timings.teacher is None


def test_students_of_one_architecture_are_timed_once_and_a_broken_representative_hands_over(wide_students, tmp_path):
    """Latency does not depend on the weights (`interleaved.architecture_key`): a sweep of many
    configurations of one student shape costs one timing, not one per trial (a 1,000-trial grid
    over learning rates would otherwise time 1,000 identical graphs). Each member gets the
    figure with its own path and `measured_as` naming the one timed; a representative that
    cannot be timed hands over to the next member of its group."""
    layers1 = wide_students["layers1"]
    copies = {}
    for name in ("a", "b", "c"):
        copies[name] = tmp_path / name
        copies[name].mkdir()
        for f in layers1.iterdir():
            if f.name != "drydock.json":  # no weights record: "a" fails in the timing, not in the check before it
                (copies[name] / f.name).write_bytes(f.read_bytes())
    (copies["a"] / "model.safetensors").write_bytes(b"not a safetensors file")  # the first of the group: broken
    settings = LatencyConfig(batch_size=2, seq_length=8, warmup=0, min_runs=2, min_seconds=0.01)
    lines: list[str] = []
    timings = measure_all({**copies, "deep": wide_students["layers8"]}, settings, log=lines.append)
    assert set(timings.errors) == {"a"} and set(timings.students) == {"b", "c", "deep"}
    b, c = timings.students["b"], timings.students["c"]
    assert (b.measured_as, c.measured_as, timings.students["deep"].measured_as) == ("", "b", "")
    assert c.p50_ms == b.p50_ms and c.path == str(copies["c"]) and b.path == str(copies["b"])
    assert sum(line.startswith("latency: a") or line.startswith("latency: b:") or line.startswith("latency: c")
               for line in lines if "p50" in line or "could not" in line) == 2  # a failed, b timed; c was not
    assert any("4 students of 2 architecture(s)" in line for line in lines)


def test_latency_record_round_trips(tmp_path, wide_students):
    m = measure_folder(wide_students["layers1"], LatencyConfig(batch_size=2, seq_length=8, warmup=0, min_runs=2, min_seconds=0.01))
    on_node = m.model_copy(update={"node_id": "n1"})
    record = LatencyRecord(settings=SETTINGS.model_copy(update={"accelerator_type": "A100"}), teacher=on_node,
                           teachers={"n1": on_node}, teacher_name="bert-tiny", students={"t1": on_node},
                           errors={"t2": "boom"}, not_timed={"t3": "t1"})
    save_record(tmp_path, record)
    loaded = load_record(tmp_path)
    assert loaded.teacher == on_node and loaded.teachers == {"n1": on_node} and loaded.students == {"t1": on_node}
    assert loaded.errors == {"t2": "boom"} and loaded.not_timed == {"t3": "t1"}
    assert loaded.settings == record.settings and loaded.settings.accelerator_type == "A100" and loaded.measured_at
    # a record written before nodes existed still loads: its measurements have no node
    old = json.loads((tmp_path / "latency.json").read_text())
    for key in ("teachers", "not_timed"):
        old.pop(key)
    for key in ("accelerator_type", "all_seeds"):
        old["settings"].pop(key)
    for measurement in [old["teacher"], *old["students"].values()]:
        measurement.pop("node_id")
        measurement.pop("pid")
    (tmp_path / "latency.json").write_text(json.dumps(old))
    loaded = load_record(tmp_path)
    assert loaded.teacher.node_id == "" and loaded.teachers == {} and loaded.settings == SETTINGS
    assert load_record(tmp_path / "nowhere") is None
    (tmp_path / "latency.json").write_text("{}")
    with pytest.raises(DrydockError, match="latency.json"):
        load_record(tmp_path)


# ----------------------------------------------------------------------------------------------
# planning a measurement under Ray: plain `ray.nodes()`-shaped data
# ----------------------------------------------------------------------------------------------


def node(node_id: str, cpus: float, gpus: float = 0, accelerator: str | None = None, alive: bool = True) -> dict:
    """One entry of `ray.nodes()` as Ray 2.60 gives it (the keys drydock reads, plus the noise)."""
    resources = {"CPU": cpus, "memory": 8e9, "object_store_memory": 1e9, f"node:10.0.0.{len(node_id)}": 1.0}
    if gpus:
        resources["GPU"] = gpus
    if accelerator:
        resources[f"accelerator_type:{accelerator}"] = 1.0
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": f"10.0.0.{len(node_id)}",
            "NodeManagerHostname": f"host-{node_id}", "Resources": resources if alive else {}}


CUDA = LatencyConfig(device="cuda")
MIXED = [node("head", 0), node("a100-1", 16, 8, "A100"), node("a100-2", 16, 4, "A100"), node("t4-1", 8, 1, "T4"),
         node("t4-2", 8, 1, "T4"), node("cpu-1", 32), node("a100-dead", 16, 8, "A100", alive=False)]


def ids(nodes) -> list[str]:
    return [n.node_id for n in nodes]


def test_cuda_on_several_accelerator_types_needs_one_named():
    with pytest.raises(DrydockError) as refused:
        plan_nodes(MIXED, CUDA)
    message = str(refused.value)
    assert message.startswith("selection.latency.accelerator_type: the cluster's GPU nodes are of several types (A100 ×2, T4 ×2)")
    assert "--set selection.latency.accelerator_type=A100" in message  # the dead A100 node is not counted
    # named: every alive node of that type, the whole node each (all its CPUs and GPUs), biggest first
    a100 = plan_nodes(MIXED, CUDA.model_copy(update={"accelerator_type": "A100"}))
    assert ids(a100) == ["a100-1", "a100-2"] and [n.request for n in a100] == [{"num_cpus": 16, "num_gpus": 8},
                                                                               {"num_cpus": 16, "num_gpus": 4}]
    assert a100[0].host == "host-a100-1" and a100[0].accelerator_type == "A100"
    assert ids(plan_nodes(MIXED, CUDA.model_copy(update={"accelerator_type": "T4"}))) == ["t4-1", "t4-2"]
    # no more nodes than students: each node times the teacher too
    assert ids(plan_nodes(MIXED, CUDA.model_copy(update={"accelerator_type": "T4"}), max_nodes=1)) == ["t4-1"]


def test_a_named_type_the_cluster_lacks_and_cuda_without_gpus_are_refused():
    with pytest.raises(DrydockError, match=r"^selection.latency.accelerator_type: H100, but no alive GPU node of the Ray "
                                           r"cluster has that type \(present: A100 ×2, T4 ×2\)$"):
        plan_nodes(MIXED, CUDA.model_copy(update={"accelerator_type": "H100"}))
    with pytest.raises(DrydockError, match="selection.latency.device: cuda, but the Ray cluster has no node with a GPU"):
        plan_nodes([node("head", 0), node("cpu-1", 8)], CUDA)
    # one type (or GPUs Ray gave no type, all alike) needs no name
    assert ids(plan_nodes([node("g1", 8, 1, "L4"), node("g2", 8, 2, "L4")], CUDA)) == ["g2", "g1"]
    assert ids(plan_nodes([node("g1", 8, 1), node("g2", 8, 1)], CUDA)) == ["g1", "g2"]
    with pytest.raises(DrydockError, match=r"several types \(L4 ×1, no accelerator type ×1\)"):
        plan_nodes([node("g1", 8, 1, "L4"), node("g2", 8, 1)], CUDA)


def test_cpu_timing_takes_the_gpu_less_nodes_of_one_shape_or_the_named_type():
    cpu = LatencyConfig(device="cpu")
    # no GPU machines (their CPUs are another model, their GPUs better left free), the most CPUs only
    nodes = [node("head", 0), node("c1", 8), node("c2", 16), node("c3", 16), node("g1", 64, 8, "A100")]
    assert ids(plan_nodes(nodes, cpu)) == ["c2", "c3"] and plan_nodes(nodes, cpu)[0].request == {"num_cpus": 16, "num_gpus": 0}
    # a GPU-only cluster times on its GPU nodes' CPUs; a named type picks those
    assert ids(plan_nodes([node("g1", 64, 8, "A100"), node("g2", 32, 1, "T4")], cpu)) == ["g1"]
    assert ids(plan_nodes(nodes, cpu.model_copy(update={"accelerator_type": "A100"}))) == ["g1"]
    with pytest.raises(DrydockError, match=r"^selection.latency.accelerator_type: T4, but no alive node of the Ray cluster"):
        plan_nodes(nodes, cpu.model_copy(update={"accelerator_type": "T4"}))
    with pytest.raises(DrydockError, match="no alive node with CPUs"):
        plan_nodes([node("head", 0), node("gone", 8, alive=False)], cpu)


def test_the_nodes_of_the_most_common_device_model_are_kept():
    assert same_device_model([("a", "Xeon 8375C"), ("b", "EPYC 7R13"), ("c", "Xeon 8375C")]) == ["a", "c"]
    assert same_device_model([("a", "NVIDIA A100-SXM4-80GB"), ("b", "NVIDIA A100-SXM4-40GB")]) == ["a"]  # a tie: the first
    assert same_device_model([]) == []


def test_the_accelerator_type_is_a_name_not_the_resource():
    from pydantic import ValidationError

    assert LatencyConfig(accelerator_type="A100").accelerator_type == "A100"
    assert LatencyConfig().accelerator_type is None and LatencyConfig().all_seeds is False
    for wrong in ("accelerator_type:A100", "", "A 100"):
        with pytest.raises(ValidationError, match="accelerator_type"):
            LatencyConfig(accelerator_type=wrong)


def timing(node_id: str, p50: float, pid: int = 1) -> Measurement:
    return Measurement(path="x", p50_ms=p50, p90_ms=p50 * 1.1, mean_ms=p50, throughput=1000 / p50, runs=10, warmup=1,
                       batch_size=1, seq_length=8, device="cpu", device_name="Test CPU", threads=1, torch_version="2",
                       num_params=1, hostname=f"host-{node_id}", node_id=node_id, pid=pid)


def test_every_speedup_uses_the_teacher_of_its_own_node():
    teachers = {"a": timing("a", 10.0), "b": timing("b", 20.0)}
    students = {"s1": timing("a", 2.0), "s2": timing("b", 2.0), "s3": timing("c", 2.0)}  # c timed no teacher
    rows = [results_table.trial_row(t, "kd", 0, {}, "finished", {"metric": 0.5}) for t in ("s1", "s2", "s3", "s4")]
    frame = fill_latency(results_table.to_frame(rows), students, teachers).set_index("trial_id")
    assert frame.loc["s1", "speedup"] == 5.0 and frame.loc["s2", "speedup"] == 10.0
    assert pd.isna(frame.loc["s3", "speedup"]) and frame.loc["s3", "latency_ms"] == 2.0
    assert pd.isna(frame.loc["s4", "latency_ms"]) and pd.isna(frame.loc["s4", "latency_device"])
    # a table written before the device column existed gets it after speedup
    old = results_table.to_frame(rows).drop(columns=["latency_device"])
    filled = fill_latency(old, students, teachers)
    assert list(filled.columns) == results_table.ordered_columns(list(filled.columns))
    # the report's one teacher figure: the lower median of the nodes' timings
    assert representative_teacher(teachers).node_id == "a"
    assert representative_teacher({**teachers, "c": timing("c", 15.0)}).node_id == "c"
    assert representative_teacher({}) is None
