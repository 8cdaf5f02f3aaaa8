"""The select stage's variants step on tiny exported models, without Ray (the stage itself, its
registry stubbed): every model × runtime a row of variants.parquet, int8 scored on the dev rows
themselves, one timing per architecture, the teacher beside the students and never on their
front, a broken variant one error row while the rest complete, results.parquet untouched, and
the report's Runtimes section, rebuilt from the file by `drydock report`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from methods.base import TaskInfo
from pipeline import results as results_table
from pipeline.config import load_spec, spec_from_dict
from pipeline.measure import engines as runtimes_module
from pipeline.measure.job import TEACHER, DevRows, tokenize, variants_wanted
from pipeline.measure.table import read_variants
from pipeline.select import stage
from pipeline.select.report import rebuild_report
from pipeline.select.stage import variants_step
from pipeline.training.export import save_student
from pipeline.workdir import VARIANTS_DIR
from tests.conftest import FakeTracker, make_tiny_bert

ROOT = Path(__file__).resolve().parents[3]
TASK = TaskInfo(name="synthetic", num_labels=2, regression=False, label_names=("class_0", "class_1"))
INT8 = "onnxruntime-int8"
SPEC = spec_from_dict({
    "name": "variants",
    "task": {"name": "synthetic", "source": "synthetic", "synthetic": {"num_train": 16, "num_dev": 40, "num_labels": 2},
             "max_seq_length": 16},
    "teacher": {"model": "random", "architecture": {"num_layers": 4}, "tokenizer": {"vocab_size": 100}},
    "selection": {"runtimes": ["torch", INT8],
                  "latency": {"batch_size": 4, "seq_length": 16, "shapes": ["1x16", "4x16"], "threads": 1, "warmup": 1,
                              "min_runs": 3, "min_seconds": 0.05}},
})


def test_variants_of_the_teacher_and_the_students(tmp_path, tiny_tokenizer, monkeypatch):
    teacher = save_student(make_tiny_bert(4), tiny_tokenizer, tmp_path / "teacher", TASK, {"role": "teacher"})
    # s0 and s1 share an architecture (one timing); s2's ONNX export breaks
    students = {name: save_student(make_tiny_bert(layers, seed=seed), tiny_tokenizer, tmp_path / "trials" / name / "student",
                                   TASK, {"method": "kd"})
                for name, layers, seed in (("s0", 2, 0), ("s1", 2, 1), ("s2", 1, 2))}
    export = runtimes_module._export_onnx

    def broken_for_s2(folder, target, hint):
        if Path(folder) == students["s2"]:
            raise RuntimeError("the exporter gave up")
        return export(folder, target, hint)

    monkeypatch.setattr(runtimes_module, "_export_onnx", broken_for_s2)
    sweep_dir, messages = tmp_path / "variants", []
    run_dir = sweep_dir / "runs" / "r1"
    # a finished sweep's table: one configuration per student, so each is timed (and gets variants)
    trials = [results_table.trial_row(name, "kd", 0, {"alpha": alpha}, "finished",
                                      {"metric": 0.5, "metric_name": "accuracy", "teacher_metric": 0.6, "student_path": str(folder)})
              for alpha, (name, folder) in zip((0.1, 0.5, 0.9), students.items())]
    results_table.write(sweep_dir / results_table.RESULTS_FILE, results_table.to_frame(trials))
    (sweep_dir / "state.json").write_text(json.dumps({"run_id": "r1"}))
    monkeypatch.setattr(stage, "judging", lambda *a: (None, None))  # the registry is not what this test is about
    registered: dict = {}  # what the registry was handed (its own tests: test_registry, test_onnx_champion)
    monkeypatch.setattr(stage, "register_front", lambda *a, **k: registered.update(k) or SimpleNamespace(decision=None))
    tracker = FakeTracker()
    frame = stage.select_stage(SPEC, tmp_path, sweep_dir, tracker, teacher, messages.append)

    # results.parquet keeps its contract: eager fp32, no variant columns
    assert list(frame.columns) == results_table.ordered_columns(list(frame.columns)) and "runtime" not in frame
    table = read_variants(run_dir / "variants.parquet")
    assert len(table) == 8 and (sweep_dir / "variants.parquet").read_bytes() == (run_dir / "variants.parquet").read_bytes()
    assert run_dir / "variants.parquet" in tracker.artifacts
    # the registry gets the variants to serve what was measured, and every configuration to tag them with
    front = registered["variants_front"]
    pd.testing.assert_frame_equal(front.variants, table)
    assert set(front.configs["best_trial_id"]) == {"s0", "s1", "s2"} and front.budget == SPEC.selection
    rows = table.set_index(["trial_id", "runtime"])
    assert set(rows.index) == {(m, rt) for m in (TEACHER, "s0", "s1", "s2") for rt in ("torch", INT8)}

    # the broken variant is a row with its error; everything else completed
    broken = rows.loc[("s2", INT8)]
    assert "the exporter gave up" in broken["error"] and math.isnan(broken["metric"]) and pd.isna(broken["pareto"])
    ok = rows.drop(index=[("s2", INT8)])
    assert ok["error"].isna().all() and ok["metric"].notna().all() and ok["parity_max_abs_diff"].notna().all()
    assert (rows.xs("torch", level="runtime")["parity_max_abs_diff"] == 0.0).all()
    for label in ("1x16", "4x16"):
        assert ok[f"latency_ms@{label}"].gt(0).all() and ok[f"speedup@{label}"].gt(0).all()
    assert rows.loc[(TEACHER, "torch"), "speedup"] == 1.0 and rows.loc[(TEACHER, INT8), "speedup_same_runtime"] == 1.0
    assert (ok["front_shape"] == "4x16").all() and (ok["threads"] == 1).all()

    # the teacher is shown, never a candidate; the students are
    assert rows.xs(TEACHER, level="trial_id")["pareto"].isna().all()
    assert ok.drop(index=TEACHER, level="trial_id")["pareto"].notna().all() and ok["pareto"].fillna(False).any()

    # s1 is timed as s0 (same architecture, same runtime) at every shape
    for runtime in ("torch", INT8):
        assert rows.loc[("s1", runtime), "measured_as"] == f"s0/{runtime}" and pd.isna(rows.loc[("s0", runtime), "measured_as"])
        assert rows.loc[("s1", runtime), "latency_ms@1x16"] == rows.loc[("s0", runtime), "latency_ms@1x16"]

    # the int8 metric is the int8 variant's own score on the dev rows, not the fp32 one copied
    int8 = rows.loc[("s0", INT8)]
    path = Path(int8["path"])
    assert path.is_file() and path.parent == run_dir / VARIANTS_DIR / "s0" and students["s0"] not in path.parents
    dev_rows = DevRows.of(*_dev(SPEC))
    tokens, pad_id = tokenize(students["s0"], dev_rows.text_a, dev_rows.text_b, dev_rows.max_length)
    variant = runtimes_module.build_variant(students["s0"], INT8, path.parent)
    assert variant.reused  # the step's own file
    scored = runtimes_module.evaluate_variant(runtimes_module.load_runner(variant, 1), tokens, dev_rows.labels,
                                              dev_rows.metric_names, dev_rows.regression, pad_id=pad_id)
    assert int8["metric"] == scored[dev_rows.primary] and int8["metric_name"] == dev_rows.primary
    assert int8["size_bytes"] < rows.loc[("s0", "torch"), "size_bytes"]

    # the report has a Runtimes section, and drydock report rebuilds it from the file, timing nothing
    written = (sweep_dir / "report.md").read_text()
    md = rebuild_report(sweep_dir).markdown.read_text()
    assert md == written
    section = md.split("## Runtimes")[1]
    assert "| s0 | onnxruntime-int8 |" in section and "p50 ms @1x16" in section and "speedup @4x16 (fp32 / same)" in section
    assert "What each stage of the stack bought at 4x16" in section and "Students that dominate the teacher in onnxruntime-int8" in section
    assert "Failed: s2/onnxruntime-int8 (RuntimeError: the exporter gave up)" in section
    assert any(line.startswith("variants: 4x16: timing 5 runner(s) for 7") for line in messages), messages

    # one measurement (issue 33): results.parquet's eager figures and latency.json are the torch rows of variants.parquet at the front's shape, each model timed
    # once; the eager-only engine (`measure_all`, "latency: <model>: p50 ...") never ran
    results = results_table.read_results(sweep_dir / results_table.RESULTS_FILE).set_index("trial_id")
    for name in ("s0", "s1", "s2"):
        eager = rows.loc[(name, "torch")]
        assert results.loc[name, "latency_ms"] == eager["latency_ms"] and results.loc[name, "speedup"] == eager["speedup"]
        assert results.loc[name, "latency_p90_ms"] == eager["latency_p90_ms"]
    record = json.loads((run_dir / "latency.json").read_text())
    assert record["teacher"]["p50_ms"] == rows.loc[(TEACHER, "torch"), "latency_ms"]
    assert record["students"]["s1"]["measured_as"] == "s0" and record["students"]["s0"]["measured_as"] == ""
    assert record["students"]["s0"]["batch_size"] == 4 and record["students"]["s0"]["threads"] == 1
    assert record["students"]["s0"]["num_params"] > 0 and record["students"]["s0"]["runs"] >= 3
    assert not [line for line in messages if line.startswith("latency: ") and ": p50 " in line and "interleaved" not in line]
    assert any(line.startswith("latency: eager fp32 from the variants' timing at 4x16") for line in messages), messages


def _dev(spec):
    from pipeline.prepare.tasks import task_spec
    from pipeline.select.evaluate import labelled_split

    return labelled_split(spec, "dev"), task_spec(spec.task), spec.task.max_seq_length


def test_nothing_to_build_beyond_eager_fp32_at_one_shape_skips_the_step(tmp_path):
    smoke = load_spec(ROOT / "sweeps" / "smoke.yaml")
    assert not variants_wanted(smoke.selection) and variants_wanted(SPEC.selection)
    assert variants_step(smoke, {"s": tmp_path}, tmp_path, tmp_path, pytest.fail) is None
    assert not (tmp_path / "variants.parquet").exists()


def test_the_job_times_with_one_warm_pass_unless_a_benchmark_overrides_it(tmp_path):
    from pipeline.measure.interleaved import InterleaveSettings
    from pipeline.measure.job import variant_job

    dev = DevRows(["a"], None, [0], ["accuracy"], "accuracy", False, 16)
    default = InterleaveSettings.model_validate(variant_job(SPEC, {"s": tmp_path / "s"}, tmp_path / "t", tmp_path, dev).interleave)
    cold = InterleaveSettings.model_validate(
        variant_job(SPEC, {"s": tmp_path / "s"}, tmp_path / "t", tmp_path, dev, interleave={"warm_passes": 0}).interleave)
    assert (default.warm_passes, cold.warm_passes) == (1, 0)
    assert default.model_copy(update={"warm_passes": 0}) == cold  # the spec's window and rounds kept
    assert cold.per_runner and cold.min_seconds == SPEC.selection.latency.min_seconds


def test_a_variants_job_that_fails_as_a_whole_leaves_the_eager_figures_to_the_eager_engine(tmp_path, tiny_tokenizer,
                                                                                            monkeypatch):
    # one measurement when the variants job runs; when it cannot run at all, the stage must still
    # time eager fp32 (measure_all, here in this process) rather than leave the front without latency
    teacher = save_student(make_tiny_bert(4), tiny_tokenizer, tmp_path / "teacher", TASK, {"role": "teacher"})
    student = save_student(make_tiny_bert(2), tiny_tokenizer, tmp_path / "trials" / "s0" / "student", TASK, {"method": "kd"})
    sweep_dir, messages = tmp_path / "variants", []
    trial = results_table.trial_row("s0", "kd", 0, {"alpha": 0.5}, "finished",
                                    {"metric": 0.5, "metric_name": "accuracy", "teacher_metric": 0.6, "student_path": str(student)})
    results_table.write(sweep_dir / results_table.RESULTS_FILE, results_table.to_frame([trial]))

    def lost(*args, **kwargs):
        raise RuntimeError("the measuring node was lost")

    monkeypatch.setattr(stage, "on_one_node", lost)
    monkeypatch.setattr(stage, "judging", lambda *a: (None, None))
    monkeypatch.setattr(stage, "register_front", lambda *a, **k: SimpleNamespace(decision=None))
    frame = stage.select_stage(SPEC, tmp_path, sweep_dir, FakeTracker(), teacher, messages.append)

    assert "variants: not built (RuntimeError: the measuring node was lost)" in messages
    assert frame.set_index("trial_id").loc["s0", "latency_ms"] > 0 and frame.set_index("trial_id").loc["s0", "speedup"] > 0
    assert any(line.startswith("latency: s0: p50 ") for line in messages), messages
    assert not (sweep_dir / "variants.parquet").exists()
