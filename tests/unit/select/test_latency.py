"""Latency measurement on tiny models, in-process (Ray not started) and, once, as a Ray task."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from methods.base import TaskInfo
from pipeline import results as results_table
from pipeline.config import LatencyConfig
from pipeline.errors import DrydockError
from pipeline.select.latency import (
    MAX_SECONDS_FACTOR,
    TEACHER,
    LatencyRecord,
    cpu_name,
    fill_latency,
    load_record,
    measure_all,
    measure_folder,
    median_interval,
    median_is_stable,
    save_record,
    time_forward,
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
    measured, errors = measure_all({TEACHER: wide_students["layers8"], "s1": wide_students["layers1"]}, SETTINGS, log=lambda _: None)
    assert errors == {}
    slow, fast = measured[TEACHER], measured["s1"]
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
    frame = fill_latency(results_table.to_frame(rows), {"s1": fast}, slow)
    assert frame.loc[0, "latency_ms"] == fast.p50_ms and frame.loc[0, "latency_p90_ms"] == fast.p90_ms
    assert frame.loc[0, "speedup"] == pytest.approx(slow.p50_ms / fast.p50_ms) and frame.loc[0, "speedup"] > 2
    assert pd.isna(frame.loc[1, "latency_ms"]) and pd.isna(frame.loc[1, "speedup"])


def test_timed_runs_meet_both_minimums_after_the_warmup():
    calls = []

    def model(**inputs):
        calls.append(inputs)
        time.sleep(0.002)

    settings = LatencyConfig(warmup=3, min_runs=4, min_seconds=0.05)
    started = time.perf_counter()
    times = time_forward(model, {"input_ids": None}, settings)
    assert len(calls) == 3 + len(times) and len(times) >= 4
    assert time.perf_counter() - started >= 0.05 and all(t >= 2.0 for t in times)
    assert len(time_forward(model, {}, LatencyConfig(warmup=0, min_runs=6, min_seconds=0.001))) >= 6


def test_an_unsettled_median_keeps_sampling_until_the_cap():
    durations = iter([0.001, 0.008] * 10_000)  # two modes: the median never settles

    def model(**inputs):
        time.sleep(next(durations))

    settings = LatencyConfig(warmup=0, min_runs=3, min_seconds=0.05)
    started = time.perf_counter()
    times = time_forward(model, {}, settings)
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
    measured, errors = measure_all({"bad": broken, "good": wide_students["layers1"]}, settings, log=lambda _: None)
    assert set(measured) == {"good"} and set(errors) == {"bad"}


def test_latency_record_round_trips(tmp_path, wide_students):
    m = measure_folder(wide_students["layers1"], LatencyConfig(batch_size=2, seq_length=8, warmup=0, min_runs=2, min_seconds=0.01))
    record = LatencyRecord(settings=SETTINGS, teacher=m, teacher_name="bert-tiny", students={"t1": m}, errors={"t2": "boom"})
    save_record(tmp_path, record)
    loaded = load_record(tmp_path)
    assert loaded.teacher == m and loaded.students == {"t1": m} and loaded.errors == {"t2": "boom"}
    assert loaded.settings == SETTINGS and loaded.measured_at
    assert load_record(tmp_path / "nowhere") is None
    (tmp_path / "latency.json").write_text("{}")
    with pytest.raises(DrydockError, match="latency.json"):
        load_record(tmp_path)


@pytest.mark.ray
def test_under_ray_each_measurement_takes_a_whole_node(wide_students):
    import ray

    from pipeline.select.latency import node_request

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 2**20, log_to_driver=False,
                 runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}})
    try:
        node_cpus = max(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"])
        assert node_request("cpu") == {"num_cpus": node_cpus, "num_gpus": 0}
        if not any(n["Resources"].get("GPU") for n in ray.nodes() if n["Alive"]):
            with pytest.raises(DrydockError, match="no node with a GPU"):
                node_request("cuda")
        settings = LatencyConfig(batch_size=2, seq_length=8, warmup=0, min_runs=2, min_seconds=0.01)
        measured, errors = measure_all({TEACHER: wide_students["layers8"], "s": wide_students["layers1"]}, settings, log=lambda _: None)
        assert errors == {}
        # the thread count defaults to the CPUs the task was granted: the whole node
        assert measured[TEACHER].threads == node_cpus and measured["s"].threads == node_cpus
        assert measured["s"].hostname and measured["s"].p50_ms > 0
    finally:
        if started_here:
            ray.shutdown()
