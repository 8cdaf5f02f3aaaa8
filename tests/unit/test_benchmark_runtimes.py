"""benchmarks/runtimes.py end to end on tiny random models: a row per model × runtime, ratios taken
against the teacher, fp32 ONNX scoring what eager scores, one timing per architecture."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from methods.base import TaskInfo
from pipeline.training.export import save_student
from tests.conftest import make_tiny_bert

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "runtimes.py"
TASK = TaskInfo(name="synthetic", num_labels=2, regression=False, label_names=("class_0", "class_1"))


def load_script():
    spec = importlib.util.spec_from_file_location("benchmark_runtimes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_every_model_in_every_runtime_timed_interleaved_one_timing_per_architecture(tmp_path, tiny_tokenizer, capsys):
    teacher = save_student(make_tiny_bert(4), tiny_tokenizer, tmp_path / "teacher", TASK, {"role": "teacher"})
    s1 = save_student(make_tiny_bert(2, seed=1), tiny_tokenizer, tmp_path / "s1", TASK, {"method": "kd"})
    s2 = save_student(make_tiny_bert(2, seed=2), tiny_tokenizer, tmp_path / "s2", TASK, {"method": "finetune"})
    out = tmp_path / "figures.json"
    argv = ["--spec", "sweeps/smoke.yaml", "--teacher", str(teacher), "--student", f"s1={s1}", "--student", f"s2={s2}",
            "--max-eval", "32", "--shapes", "1x8,4x16", "--threads", "1", "--warmup", "1", "--min-rounds", "3",
            "--min-seconds", "0.05", "--max-seconds", "0.3", "--out", str(tmp_path / "onnx"), "--json", str(out),
            "--summary-shape", "4x16", "--summary-layers", "2"]
    load_script().main(argv, log=lambda line: None)
    report = json.loads(out.read_text())
    printed = capsys.readouterr().out

    rows = {(r["model"], r["runtime"]): r for r in report["rows"]}
    runtimes = ("torch", "onnxruntime", "onnxruntime-int8")
    assert set(rows) == {(m, rt) for m in ("teacher", "s1", "s2") for rt in runtimes} and len(report["rows"]) == 9
    assert report["shapes"] == ["1x8", "4x16"]
    for label in report["shapes"]:
        eager = rows["teacher", "torch"]["latency"][label]
        assert eager["speedup_vs_teacher_eager"]["median"] == 1.0 == eager["speedup_vs_teacher_same_runtime"]["median"]
        assert rows["teacher", "onnxruntime-int8"]["latency"][label]["speedup_vs_teacher_int8"]["median"] == 1.0
        # s2 has s1's architecture: one measurement per runtime, the same figures, named
        assert report["measurements"][label]["runners"] == 6
        for rt in runtimes:
            first, second = rows["s1", rt]["latency"][label], rows["s2", rt]["latency"][label]
            assert first["measured_as"] is None and second["measured_as"] == f"s1/{rt}"
            assert second["p50_ms"] == first["p50_ms"] > 0
            assert second["speedup_vs_teacher_eager"] == first["speedup_vs_teacher_eager"]
    for model in ("teacher", "s1", "s2"):
        torch_row, ort_row, int8_row = (rows[model, rt] for rt in runtimes)
        assert ort_row["metric"] == torch_row["metric"] and ort_row["metric_delta_vs_fp32"] == 0.0
        assert torch_row["metric_delta_vs_fp32"] == 0.0 and torch_row["parity_max_abs_diff"] == 0.0
        assert all(rows[model, rt]["parity_ok"] for rt in runtimes)
        assert ort_row["parity_max_abs_diff"] < 1e-4 and int8_row["size_bytes"] < ort_row["size_bytes"]
        assert Path(int8_row["path"]).is_file() and Path(int8_row["path"]).parent == tmp_path / "onnx" / model
    # the two students' weights differ: their scores are their own, not one copied
    assert rows["s1", "torch"]["metrics"] != {} and rows["s1", "torch"]["source"] != rows["s2", "torch"]["source"]
    summary = report["summary"]
    assert summary["found"] and summary["shape"] == "4x16" and summary["model"] in ("s1", "s2")
    assert summary["speedup_vs_teacher_eager"] == rows[summary["model"], summary["runtime"]]["latency"]["4x16"]["speedup_vs_teacher_eager"]
    # the printed report: machine, command, a row per model × runtime, the done-when line
    assert "command: " in printed and "--shapes 1x8,4x16" in printed and "onnxruntime" in printed
    assert sum(line.startswith(("teacher ", "s1 ", "s2 ")) for line in printed.splitlines()) == 9
    assert "(as s1)" in printed and "done-when at 4x16: best 2-layer student runtime" in printed
