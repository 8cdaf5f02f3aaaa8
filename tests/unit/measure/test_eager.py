"""results.parquet's eager figures read off the variants' measurement (`pipeline.measure.eager`):
the `torch` runners at the front's shape become `Measurement`s with the job's host, a student
timed as another keeps its name, the speedup is the within-round ratio, and a model with no
eager timing has its reason instead of a figure."""

from __future__ import annotations

import pytest

from pipeline.config import LatencyConfig
from pipeline.measure.eager import eager_view
from pipeline.measure.interleaved import InterleavedResult, InterleaveSettings, RunnerTiming, Speedup
from pipeline.measure.job import Host, VariantFacts, VariantOutcome
from pipeline.measure.latency import fill_latency
from tests.conftest import make_tiny_bert

HOST = Host(hostname="node-a", pid=41, node_id="n1", device_name="AMD EPYC", torch_version="2.13.0")


def timing(p50: float, measured_as: str | None = None) -> RunnerTiming:
    return RunnerTiming(p50_ms=p50, p90_ms=p50 * 1.2, mean_ms=p50 * 1.1, low_ms=p50 * 0.9, high_ms=p50 * 1.1, rounds=12,
                        warmup=3, measured_as=measured_as)


def result(timings: dict[str, RunnerTiming], speedups: dict[str, float]) -> InterleavedResult:
    return InterleavedResult(
        settings=InterleaveSettings(), references=["teacher/torch"], timings=timings, rounds=12, seconds=3.0, stable=True,
        speedups={name: {"teacher/torch": Speedup(median=value, low=value * 0.9, high=value * 1.1, rounds=12)}
                  for name, value in speedups.items()})


def test_the_torch_rows_at_the_front_shape_are_the_eager_figures(tmp_path):
    folders = {}
    for name, layers in (("teacher", 4), ("s0", 2), ("s1", 2), ("s2", 1)):
        folders[name] = tmp_path / name
        make_tiny_bert(layers).save_pretrained(folders[name])
    front = result({"teacher/torch": timing(40.0), "s0/torch": timing(10.0), "s1/torch": timing(10.0, "s0/torch"),
                    "s0/onnxruntime-int8": timing(5.0)},
                   {"teacher/torch": 1.0, "s0/torch": 3.9, "s1/torch": 3.9, "s0/onnxruntime-int8": 7.5})
    other_shape = result({"teacher/torch": timing(4.0), "s0/torch": timing(1.0)}, {"teacher/torch": 1.0, "s0/torch": 4.4})
    facts = [VariantFacts("s2", "torch", None, None, None, error="RuntimeError: could not load")]
    outcome = VariantOutcome(facts, {"1x16": other_shape, "4x16": front}, threads=2, host=HOST)
    settings = LatencyConfig.model_validate({"batch_size": 4, "seq_length": 16, "shapes": ["1x16", "4x16"]})

    students = {name: folders[name] for name in ("s0", "s1", "s2")}
    timings, speedups = eager_view(outcome, students, folders["teacher"], settings)

    teacher = timings.teachers["n1"]
    assert timings.teacher == teacher and teacher.p50_ms == 40.0 and teacher.measured_as == ""
    s0, s1 = timings.students["s0"], timings.students["s1"]
    assert (s0.p50_ms, s0.p90_ms, s0.mean_ms, s0.runs, s0.warmup) == (10.0, 12.0, pytest.approx(11.0), 12, 3)
    assert s0.throughput == 4 * 1000.0 / 10.0 and (s0.batch_size, s0.seq_length, s0.device) == (4, 16, "cpu")
    assert (s0.hostname, s0.pid, s0.node_id, s0.device_name, s0.torch_version, s0.threads) == (
        "node-a", 41, "n1", "AMD EPYC", "2.13.0", 2)
    assert s0.path == str(folders["s0"]) and s0.num_params == sum(p.numel() for p in make_tiny_bert(2).parameters())
    assert s1.measured_as == "s0" and s0.measured_as == ""
    # the within-round ratio, not the ratio of the p50s (40 / 10 = 4)
    assert speedups == {"s0": 3.9, "s1": 3.9}
    assert timings.errors == {"s2": "RuntimeError: could not load"} and "s2" not in timings.students

    # results.parquet takes these speedups as they are
    import pandas as pd

    frame = pd.DataFrame({"trial_id": ["s0", "s1", "s2"]})
    filled = fill_latency(frame, timings.students, timings.teachers, speedups)
    assert filled["speedup"].tolist()[:2] == [3.9, 3.9] and pd.isna(filled["speedup"].iloc[2])
    assert filled["latency_ms"].tolist()[:2] == [10.0, 10.0]
    # without them, the p50 ratio over the node's teacher, as measure_all's figures always were
    assert fill_latency(frame, timings.students, timings.teachers)["speedup"].tolist()[:2] == [4.0, 4.0]


def test_no_timing_at_the_front_shape_is_a_reason_not_a_figure(tmp_path):
    outcome = VariantOutcome([], {"1x16": result({"teacher/torch": timing(4.0)}, {"teacher/torch": 1.0})}, threads=1,
                             host=HOST)
    settings = LatencyConfig.model_validate({"batch_size": 4, "seq_length": 16, "shapes": ["1x16", "4x16"]})
    timings, speedups = eager_view(outcome, {"s0": tmp_path}, tmp_path, settings)
    assert timings.students == {} and timings.teachers == {} and speedups == {}
    assert timings.errors == {"teacher": "no eager fp32 timing at 4x16", "s0": "no eager fp32 timing at 4x16"}
