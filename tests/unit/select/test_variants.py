"""variants.parquet on hand-built measurements: the front over (configuration, runtime) where a
latency difference inside the intervals never decides, the budget, the stack summary's figures;
and the spec fields that choose runtimes and shapes (the table's columns and file:
tests/unit/measure/test_table.py)."""

from __future__ import annotations

import math
import typing
from pathlib import Path

import pandas as pd
import pytest

from pipeline.config import LatencyConfig, RuntimeName, SelectionConfig, Shape, load_spec, spec_from_dict, spec_to_dict
from pipeline.errors import SpecError
from pipeline.measure.interleaved import InterleavedResult, InterleaveSettings, RunnerTiming, Speedup
from pipeline.measure.job import TEACHER, VariantFacts
from pipeline.measure.runtimes import EAGER
from pipeline.select.variants import (
    INT8,
    dominated_by,
    stack_summary,
    variant_champion,
    variant_front,
    variant_rows,
)

ROOT = Path(__file__).resolve().parents[3]
ORT = "onnxruntime"
REF = f"{TEACHER}/{EAGER}"


def timing(p50: float, low: float, high: float, measured_as: str | None = None) -> RunnerTiming:
    return RunnerTiming(p50_ms=p50, p90_ms=p50 * 1.25, mean_ms=p50, low_ms=low, high_ms=high, rounds=20, warmup=3,
                        measured_as=measured_as)


def speedup(median: float, low: float | None = None, high: float | None = None) -> Speedup:
    return Speedup(median=median, low=median if low is None else low, high=median if high is None else high, rounds=20)


def measured(runners: dict[str, tuple[float, float, float]], speedups: dict[str, float] | None = None,
             errors: dict[str, str] | None = None) -> InterleavedResult:
    """name → (p50, low, high). Speedups over "teacher/torch" and "teacher/<runtime>": `speedups`
    where given (over teacher/torch), else the ratio of p50s; intervals ±5%."""
    timings = {name: timing(*figures) for name, figures in runners.items()}
    references = sorted({REF, *(f"{TEACHER}/{name.split('/')[1]}" for name in runners)} & set(runners))
    out: dict[str, dict[str, Speedup]] = {}
    for name, t in timings.items():
        out[name] = {}
        for ref in references:
            ratio = (speedups or {}).get(name) if ref == REF else None
            ratio = timings[ref].p50_ms / t.p50_ms if ratio is None else ratio
            out[name][ref] = speedup(ratio, ratio * 0.95, ratio * 1.05)
    return InterleavedResult(settings=InterleaveSettings(), references=references, timings=timings, speedups=out, rounds=20,
                             seconds=2.0, stable=True, errors=errors or {})


def fact(name: str, metric: float | None, size: int = 1000, **more) -> VariantFacts:
    trial_id, runtime = name.split("/")
    return VariantFacts(trial_id=trial_id, runtime=runtime, metric=metric, size_bytes=size, path=f"/runs/{trial_id}/{runtime}",
                        parity_max_abs_diff=1e-6, metric_name="accuracy", **more)


TEACHER_RUNNERS = {"teacher/torch": (10.0, 9.5, 10.5), "teacher/onnxruntime-int8": (5.0, 4.8, 5.2)}
TEACHER_FACTS = [fact("teacher/torch", 0.90, 400), fact("teacher/onnxruntime-int8", 0.89, 100)]


def table(students: dict[str, tuple[float, float, float, float]], sizes: dict[str, int] | None = None, **kwargs) -> pd.DataFrame:
    """One shape (32x64); students: name → (metric, p50, low, high)."""
    runners = {**TEACHER_RUNNERS, **{name: figures[1:] for name, figures in students.items()}}
    facts = TEACHER_FACTS + [fact(name, figures[0], (sizes or {}).get(name, 1000)) for name, figures in students.items()]
    return variant_rows(facts, {"32x64": measured(runners)}, front_shape="32x64", device="cpu", threads=2, **kwargs)


def marks(frame: pd.DataFrame) -> dict[str, bool | None]:
    return {f"{r.trial_id}/{r.runtime}": (None if r.pareto is pd.NA else bool(r.pareto)) for r in frame.itertuples()}


# ----------------------------------------------------------------------------------------------
# the front
# ----------------------------------------------------------------------------------------------


def test_int8_faster_beyond_the_intervals_and_within_accuracy_is_on_the_front():
    frame = table({"s1/torch": (0.86, 4.0, 3.8, 4.2), "s1/onnxruntime-int8": (0.855, 2.0, 1.9, 2.1)})
    assert marks(frame) == {"teacher/torch": None, "teacher/onnxruntime-int8": None, "s1/torch": True, "s1/onnxruntime-int8": True}
    # as accurate and faster: the fp32 variant is dominated
    frame = table({"s1/torch": (0.86, 4.0, 3.8, 4.2), "s1/onnxruntime-int8": (0.86, 2.0, 1.9, 2.1)})
    assert marks(frame)["s1/torch"] is False and marks(frame)["s1/onnxruntime-int8"] is True


def test_a_latency_difference_inside_the_intervals_never_decides():
    # s2's p50 is lower, but the intervals overlap: the more accurate s1 wins, s2 is off the front
    frame = table({"s1/torch": (0.86, 4.0, 3.5, 4.5), "s2/torch": (0.85, 3.8, 3.4, 4.4)})
    assert marks(frame)["s1/torch"] is True and marks(frame)["s2/torch"] is False
    # the same p50s with intervals that separate: s2 is faster, both are on the front
    frame = table({"s1/torch": (0.86, 4.0, 3.95, 4.05), "s2/torch": (0.85, 3.8, 3.75, 3.85)})
    assert marks(frame)["s1/torch"] is True and marks(frame)["s2/torch"] is True


def test_size_breaks_a_tie_on_both_and_exact_ties_are_all_kept():
    frame = table({"s1/torch": (0.86, 4.0, 3.5, 4.5), "s1/onnxruntime": (0.86, 3.9, 3.4, 4.4)},
                  sizes={"s1/torch": 1000, "s1/onnxruntime": 900})
    assert marks(frame)["s1/torch"] is False and marks(frame)["s1/onnxruntime"] is True
    frame = table({"s1/torch": (0.86, 4.0, 3.5, 4.5), "s1/onnxruntime": (0.86, 3.9, 3.4, 4.4)})
    assert marks(frame)["s1/torch"] is True and marks(frame)["s1/onnxruntime"] is True


def test_overlap_is_not_transitive_and_the_front_is_never_empty():
    # a is faster than b; c overlaps both; b is smallest, then c, then a. Pairwise "as accurate,
    # within the noise, smaller" would run in a circle (b over c, c over a, a over b by speed)
    frame = table({"a/torch": (0.8, 1.5, 1.0, 2.0), "b/torch": (0.8, 3.5, 3.0, 4.0), "c/torch": (0.8, 2.5, 1.5, 3.5)},
                  sizes={"a/torch": 3000, "b/torch": 1000, "c/torch": 2000})
    assert {k: v for k, v in marks(frame).items() if not k.startswith(TEACHER)} == {"a/torch": False, "b/torch": False, "c/torch": True}


def test_size_objective_keeps_the_smaller_less_accurate_variant():
    students = {"s1/torch": (0.86, 4.0, 3.5, 4.5), "s1/onnxruntime-int8": (0.85, 3.9, 3.4, 4.4)}
    sizes = {"s1/torch": 1000, "s1/onnxruntime-int8": 300}
    assert marks(table(students, sizes))["s1/onnxruntime-int8"] is False
    both = marks(table(students, sizes, budget=SelectionConfig(size_objective=True)))
    assert both["s1/torch"] is True and both["s1/onnxruntime-int8"] is True


def test_the_teacher_is_never_on_the_front_and_the_students_that_dominate_it_are_named():
    # the teacher's int8 variant (0.89, 5 ms) is more accurate and faster than s1: s1 stays on the
    # front all the same, and the teacher's rows are never candidates
    frame = table({"s1/torch": (0.885, 6.0, 5.8, 6.2), "s2/onnxruntime-int8": (0.80, 2.0, 1.9, 2.1)})
    assert marks(frame) == {"teacher/torch": None, "teacher/onnxruntime-int8": None, "s1/torch": True, "s2/onnxruntime-int8": True}
    assert dominated_by(frame, TEACHER, INT8) == []
    # s3 is as accurate as the teacher's int8 variant and faster beyond the intervals: it dominates it
    frame = table({"s1/torch": (0.885, 6.0, 5.8, 6.2), "s3/onnxruntime-int8": (0.89, 2.0, 1.9, 2.1)})
    assert marks(frame)["s3/onnxruntime-int8"] is True and marks(frame)["s1/torch"] is False
    assert dominated_by(frame, TEACHER, INT8) == ["s3/onnxruntime-int8"]
    assert dominated_by(frame, TEACHER, EAGER) == []  # 0.90: more accurate than every student
    assert dominated_by(frame, "s1", EAGER) == ["s3/onnxruntime-int8"]
    assert dominated_by(frame, "nobody", EAGER) == []


def test_a_variant_with_an_error_or_without_figures_is_no_candidate():
    runners = {**TEACHER_RUNNERS, "s1/torch": (4.0, 3.9, 4.1)}
    facts = [*TEACHER_FACTS, fact("s1/torch", 0.86), fact("s1/onnxruntime-int8", None, error="parity: off by 3.1"),
             fact("s2/torch", 0.99)]
    frame = variant_rows(facts, {"32x64": measured(runners, errors={"s2/torch": "RuntimeError: boom"})},
                         front_shape="32x64", device="cpu", threads=2)
    assert marks(frame) == {"teacher/torch": None, "teacher/onnxruntime-int8": None, "s1/torch": True,
                            "s1/onnxruntime-int8": None, "s2/torch": None}
    s2 = frame.set_index(["trial_id", "runtime"]).loc[("s2", "torch")]
    assert s2["latency_error"] == "32x64: RuntimeError: boom" and math.isnan(s2["latency_ms"])


# ----------------------------------------------------------------------------------------------
# the budget and the champion
# ----------------------------------------------------------------------------------------------

BUDGETED = {"fast/onnxruntime-int8": (0.84, 2.0, 1.9, 2.1), "mid/torch": (0.85, 4.9, 4.5, 5.3),
            "slow/torch": (0.87, 6.0, 5.8, 6.2)}


def test_the_budget_judges_the_p50_and_outside_it_is_no_candidate():
    frame = table(BUDGETED, budget=SelectionConfig(max_latency_ms=5.0))
    pd.testing.assert_frame_equal(variant_front(table(BUDGETED), SelectionConfig(max_latency_ms=5.0)), frame)  # re-marked with a budget
    # mid's interval straddles 5 ms, its p50 is within: a candidate; slow is over: never considered
    assert marks(frame)["slow/torch"] is None and marks(frame)["mid/torch"] is True and marks(frame)["fast/onnxruntime-int8"] is True
    # speedups over teacher/torch (10 ms): fast 5, mid 2.04, slow 1.67
    frame = table(BUDGETED, budget=SelectionConfig(min_speedup=2.5))
    assert marks(frame)["fast/onnxruntime-int8"] is True and marks(frame)["mid/torch"] is None and marks(frame)["slow/torch"] is None


def test_a_variant_beaten_only_over_the_budget_returns_to_the_front():
    students = {"a/torch": (0.87, 4.0, 3.5, 4.5), "b/torch": (0.86, 3.6, 3.3, 3.9)}  # overlapping: a dominates b
    assert marks(table(students))["b/torch"] is False
    assert marks(table(students, budget=SelectionConfig(max_latency_ms=3.8))) == {"teacher/torch": None, "teacher/onnxruntime-int8": None,
                                                          "a/torch": None, "b/torch": True}


def test_the_champion_is_the_most_accurate_within_the_budget():
    frame = table(BUDGETED)
    assert variant_champion(frame)["trial_id"] == "slow"
    assert variant_champion(frame, SelectionConfig(max_latency_ms=5.0))["trial_id"] == "mid"
    assert variant_champion(frame, SelectionConfig(min_speedup=2.5))["trial_id"] == "fast"
    assert variant_champion(frame, SelectionConfig(max_latency_ms=1.0)) is None
    # a tie on the metric: the faster beyond the intervals
    tied = table({"x/torch": (0.86, 4.0, 3.9, 4.1), "y/onnxruntime-int8": (0.86, 2.0, 1.9, 2.1)})
    assert variant_champion(tied)["trial_id"] == "y"


# ----------------------------------------------------------------------------------------------
# the stack summary
# ----------------------------------------------------------------------------------------------


def stack_table(**kwargs) -> pd.DataFrame:
    runners = {**TEACHER_RUNNERS, "s/torch": (3.0, 2.9, 3.1), "s/onnxruntime-int8": (2.0, 1.9, 2.1),
               "w/onnxruntime-int8": (1.0, 0.9, 1.1)}
    ratios = {"teacher/onnxruntime-int8": 2.0, "s/torch": 3.0, "s/onnxruntime-int8": 4.5, "w/onnxruntime-int8": 9.0}
    facts = [fact("teacher/torch", 0.90), fact("teacher/onnxruntime-int8", 0.88), fact("s/torch", 0.87),
             fact("s/onnxruntime-int8", 0.86), fact("w/onnxruntime-int8", 0.70)]
    return variant_rows(facts, {"32x64": measured(runners, ratios)}, front_shape="32x64", device="cpu", threads=2, **kwargs)


def test_stack_summary_gives_each_stage_its_speedup_and_metric_change():
    summary = stack_summary(stack_table())
    assert summary is not None and summary.champion == "s/torch" and summary.shape == "32x64"
    steps = {s.label: s for s in summary.steps}
    assert [s.label for s in summary.steps] == ["teacher fp32", "teacher int8", "student fp32", "student int8"]
    assert [(s.trial_id, s.runtime) for s in summary.steps] == [(TEACHER, EAGER), (TEACHER, INT8), ("s", EAGER), ("s", INT8)]
    assert [s.speedup for s in summary.steps] == [1.0, 2.0, 3.0, 4.5]  # over teacher/torch, as measured
    assert [s.step_speedup for s in summary.steps] == [None, 2.0, 1.5, 1.5]  # exact: 2/1, 3/2, 4.5/3
    assert steps["teacher fp32"].metric_delta is None
    assert [s.metric_delta for s in summary.steps[1:]] == pytest.approx([-0.02, -0.01, -0.01])
    assert (steps["student int8"].speedup_low, steps["student int8"].speedup_high) == pytest.approx((4.275, 4.725))
    line = summary.line()
    for text in ("32x64", "teacher fp32 (accuracy 0.9000)", "teacher int8 2.00× (-2.00 pts)", "student fp32 1.50× (-1.00 pts)",
                 "student int8 1.50× (-1.00 pts)", f"student int8 in all 4.50× [{4.5 * 0.95:.2f}-{4.5 * 1.05:.2f}]", "-4.00 pts",
                 "s/torch"):
        assert text in line, (text, line)


def test_stack_summary_follows_the_champion_within_the_budget():
    summary = stack_summary(stack_table(), SelectionConfig(min_speedup=5.0))
    assert summary is not None and summary.champion == "w/onnxruntime-int8"
    student_fp32 = summary.steps[2]
    assert (student_fp32.trial_id, student_fp32.metric, student_fp32.speedup, student_fp32.step_speedup) == ("w", None, None, None)
    assert summary.steps[3].step_speedup is None and summary.steps[3].speedup == 9.0
    assert "n/a" in summary.line()
    assert stack_summary(stack_table(), SelectionConfig(max_latency_ms=0.5)) is None


# ----------------------------------------------------------------------------------------------
# the spec: selection.runtimes, selection.latency.shapes / front_shape
# ----------------------------------------------------------------------------------------------

MINIMAL = {
    "name": "t",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "methods": {"kd": {}},
}


def problems(selection: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict({**MINIMAL, "selection": selection})
    return info.value.problems


def test_defaults():
    assert {EAGER, INT8} <= set(typing.get_args(RuntimeName))
    selection = spec_from_dict(MINIMAL).selection
    assert selection.runtimes == ["torch", "onnxruntime-int8"]
    latency = selection.latency
    assert [s.label for s in latency.shapes] == ["1x128", "32x64"] and latency.front_shape.label == "32x64"
    assert (latency.batch_size, latency.seq_length) == (32, 64)
    assert SelectionConfig(latency=LatencyConfig(device="cuda")).runtimes == ["torch", "torch-fp16"]
    assert spec_from_dict({**MINIMAL, "selection": {"runtimes": ["torch-bf16"]}}).selection.runtimes == [
        "torch", "torch-bf16"]  # half precision on a CPU too: it pays on CPUs with bf16 matmuls
    assert spec_from_dict({**MINIMAL, "selection": {"latency": {"device": "cuda"}, "runtimes": ["onnxruntime"]}}).selection.runtimes == [
        "torch", "onnxruntime"]  # torch always: added when missing


def test_shapes_as_text_or_mappings():
    latency = LatencyConfig(shapes=["1x128", " 8 x 32 ", {"batch_size": 32, "seq_length": 64}], front_shape="8x32")
    assert [s.label for s in latency.shapes] == ["1x128", "8x32", "32x64"]
    assert latency.front_shape == Shape(batch_size=8, seq_length=32) and (latency.batch_size, latency.seq_length) == (8, 32)
    assert (problems({"latency": {"shapes": ["1by128"]}})
            == ['selection.latency.shapes.0: expected BATCHxLENGTH, e.g. "1x128", or {batch_size: 1, seq_length: 128} (got \'1by128\')'])
    assert problems({"latency": {"shapes": ["1x128", "1x128"]}}) == ["selection.latency.shapes: 1x128 is listed twice"]
    (line,) = problems({"latency": {"shapes": ["0x128"]}})
    assert line.startswith("selection.latency.shapes.0.batch_size: ")


def test_batch_size_and_seq_length_name_the_front_and_are_timed():
    latency = spec_from_dict({**MINIMAL, "selection": {"latency": {"batch_size": 8, "seq_length": 32}}}).selection.latency
    assert latency.front_shape.label == "8x32" and [s.label for s in latency.shapes] == ["1x128", "32x64", "8x32"]
    latency = LatencyConfig(batch_size=1, seq_length=128)
    assert latency.front_shape.label == "1x128" and [s.label for s in latency.shapes] == ["1x128", "32x64"]


def test_front_shape_errors_name_the_field():
    (line,) = problems({"latency": {"front_shape": "8x32"}})
    assert line.startswith("selection.latency.front_shape: 8x32 is not one of selection.latency.shapes (1x128, 32x64)")
    (line,) = problems({"latency": {"front_shape": "1x128", "batch_size": 32, "seq_length": 64}})
    assert line.startswith("selection.latency.front_shape: 1x128 disagrees with selection.latency.batch_size (32) and "
                           "selection.latency.seq_length (64)")


def test_runtime_errors_name_the_field():
    assert problems({"runtimes": ["torch", "torch"]}) == ["selection.runtimes: 'torch' is listed twice"]
    (line,) = problems({"runtimes": ["onnx"]})
    assert line.startswith("selection.runtimes.0: ")
    gpu = spec_from_dict({**MINIMAL, "selection": {"latency": {"device": "cuda"}, "runtimes": ["torch-bf16", "onnxruntime-int8"]}})
    assert gpu.selection.runtimes == ["torch", "torch-bf16", "onnxruntime-int8"]


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps").glob("*.yaml")) + sorted((ROOT / "cluster" / "specs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_specs_validate_and_round_trip(path, monkeypatch):
    monkeypatch.setenv("GLUE_DIR", str(ROOT.parent / "shared" / "data" / "glue"))
    spec = load_spec(path)
    latency = spec.selection.latency
    assert latency.front_shape in latency.shapes and "torch" in spec.selection.runtimes
    assert (latency.front_shape.batch_size, latency.front_shape.seq_length) == (latency.batch_size, latency.seq_length)
    assert spec_from_dict(spec_to_dict(spec)) == spec
