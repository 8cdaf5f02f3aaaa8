"""`drydock report`: the report rebuilt from a hand-made sweep folder, without running anything."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest

from methods.base import TaskInfo
from pipeline import results as results_table
from pipeline.cli.outputs import COMMANDS, add_commands
from pipeline.cli.tables import pareto_table_text
from pipeline.config import LatencyConfig, SelectionConfig, spec_from_dict, spec_to_dict
from pipeline.errors import DrydockError
from pipeline.measure.job import TEACHER
from pipeline.measure.latency import LatencyRecord, Measurement, save_record
from pipeline.measure.table import typed
from pipeline.select.pareto import select
from pipeline.select.report import ReportContext, pareto_figure, rebuild_report, write_report
from pipeline.select.variants import INT8
from pipeline.training.export import save_student
from tests.conftest import make_tiny_bert

TASK = TaskInfo(name="sst2", num_labels=2, regression=False, label_names=("negative", "positive"))
SETTINGS = LatencyConfig(batch_size=8, seq_length=32)


def measurement(path: str, p50: float) -> Measurement:
    return Measurement(path=path, p50_ms=p50, p90_ms=p50 * 1.1, mean_ms=p50, throughput=8000 / p50, runs=20, warmup=3,
                       batch_size=8, seq_length=32, device="cpu", device_name="Test CPU 9000", threads=2,
                       torch_version="2.13.0", num_params=1_234_567 if path == "teacher" else 50_000, hostname="box")


# (method, params, seed, metric, latency) — kd alpha=0.5 is best, finetune fastest, kd alpha=0.9 dominated
TRIALS = [
    ("kd", {"alpha": 0.5}, 0, 0.86, 4.0), ("kd", {"alpha": 0.5}, 1, 0.84, 4.2), ("kd", {"alpha": 0.5}, 2, 0.85, 4.1),
    ("kd", {"alpha": 0.9}, 0, 0.80, 4.5), ("kd", {"alpha": 0.9}, 1, 0.78, 4.4),
    ("finetune", {"num_layers": 1}, 0, 0.80, 2.0), ("finetune", {"num_layers": 1}, 1, 0.81, 2.1),
    ("finetune", {"num_layers": 1}, 2, 0.79, 2.0),
]


@pytest.fixture
def sweep_dir(tmp_path, tiny_tokenizer) -> Path:
    """A finished sweep's folder as the select stage leaves it: results, latency.json, saved spec."""
    sweep_dir = tmp_path / "demo"
    rows, students = [], {}
    for method, params, seed, metric, latency in TRIALS:
        trial_id = f"{method}-{'-'.join(f'{k}{v}' for k, v in params.items())}-s{seed}"
        folder = save_student(make_tiny_bert(2, seed=seed), tiny_tokenizer, sweep_dir / "runs" / "r1" / "trials" / trial_id / "student",
                              TASK, {"method": method, "teacher": "tiny-teacher", "data_fingerprint": "abc123"})
        row = results_table.trial_row(trial_id, method, seed, params, "finished",
                                      {"metric": metric, "metric_name": "accuracy", "teacher_metric": 0.9, "num_params": 50_000,
                                       "student_path": str(folder)}, mlflow_run_id=None)
        row.update(latency_ms=latency, latency_p90_ms=latency * 1.1, speedup=10.0 / latency)
        rows.append(row)
        students[trial_id] = measurement(str(folder), latency)
    rows.append(results_table.trial_row("kd-alpha0.1-s0", "kd", 0, {"alpha": 0.1}, "failed", error="RuntimeError: out of memory"))
    rows.append(results_table.trial_row("kd-alpha0.1-s1", "kd", 1, {"alpha": 0.1}, "stopped", {"metric": 0.6}))
    results_table.write(sweep_dir / results_table.RESULTS_FILE, results_table.to_frame(rows))
    save_record(sweep_dir, LatencyRecord(settings=SETTINGS, teacher=measurement("teacher", 10.0), teacher_name="tiny-teacher",
                                         students=students))
    spec = spec_from_dict({
        "name": "demo", "task": {"name": "sst2", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 100}},
        "selection": {"latency": SETTINGS.model_dump(), "max_latency_ms": 3.0},
    })
    (sweep_dir / "state.json").write_text(json.dumps({"run_id": "r1"}))
    (sweep_dir / "runs" / "r1" / "spec.json").write_text(json.dumps(spec_to_dict(spec)))
    return sweep_dir


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="drydock")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return COMMANDS[args.command](args)


def test_report_is_rebuilt_from_files(sweep_dir, capsys):
    assert run_cli(["report", str(sweep_dir)]) == 0
    printed = capsys.readouterr().out
    assert str(sweep_dir / "report.md") in printed and str(sweep_dir / "pareto.png") in printed
    assert "finetune num_layers=1 ◆" in printed and "kd alpha=0.5" in printed and "kd alpha=0.9" not in printed
    assert "◆ champion: finetune num_layers=1" in printed  # the saved spec's 3 ms budget

    md = (sweep_dir / "report.md").read_text()
    # the teacher line: name, metric from results.parquet, latency and size from latency.json
    assert "**Teacher** tiny-teacher: accuracy 0.9000 · latency 10.00 ms (p90 11.00), 1.23M params" in md
    assert "Latency: batch 8 × 32 tokens on Test CPU 9000 (cpu, 2 threads, torch 2.13.0); p50 / p90 in ms." in md
    # the budget from the saved spec (3 ms): only finetune qualifies
    # seed means, then the registered (best) seed's own timing, which the budget is checked on
    assert ("**Champion** (best mean metric on the front whose registered seed is within latency ≤ 3 ms): finetune num_layers=1 — "
            "0.8000 ± 0.0100 (n=3), 2.03 / 2.24 ms, 4.92× (seed means); "
            "registered seed finetune-num_layers1-s1: 2.10 / 2.31 ms, 4.76×") in md
    assert "Trials: 10 (8 finished, 1 failed, 1 stopped)" in md
    front = md.split("## Pareto front")[1].split("## Paired comparisons")[0]
    assert "| finetune num_layers=1 | 0.8000 ± 0.0100 (n=3) | 2.03 / 2.24 | 4.92× | 50,000 | finetune-num_layers1-s1 (0.8100, 2.10) |" in front
    assert "| kd alpha=0.5 | 0.8500 ± 0.0100 (n=3) | 4.10 / 4.51 | 2.44× | 50,000 | kd-alpha0.5-s0 (0.8600, 4.00) |" in front
    assert "kd alpha=0.9" not in front
    assert front.index("finetune num_layers=1") < front.index("kd alpha=0.5")  # by latency
    # paired over seeds 0..2: kd 0.5 − finetune = 0.06, 0.03, 0.06
    comparisons = md.split("## Paired comparisons")[1].split("## All configurations")[0]
    assert "| kd alpha=0.5 − finetune num_layers=1 | 3 (0, 1, 2) | +0.0500 | [+0.0300, +0.0600] |" in comparisons
    every = md.split("## All configurations")[1]
    assert "| kd | kd alpha=0.9 | 0.7900 ± 0.0141 (n=2) | 0.878 |" in every
    assert "kd alpha=0.1" not in every  # failed and stopped trials are not configurations
    assert "- kd-alpha0.1-s0: RuntimeError: out of memory" in md
    assert "![accuracy vs latency](pareto.png)" in md

    page = (sweep_dir / "report.html").read_text()
    assert page.count("<table") == 4 and '<img src="pareto.png"' in page
    assert "<strong>Teacher</strong> tiny-teacher" in page and "kd alpha=0.5 − finetune num_layers=1" in page

    from matplotlib.image import imread

    image = imread(sweep_dir / "pareto.png")
    assert image.shape[:2] == (660, 960)  # 8 × 5.5 in at 120 dpi
    table = (sweep_dir / "pareto.csv").read_text().splitlines()
    assert len(table) == 1 + 3 and table[0].startswith("config,method,params,n,")


def test_report_without_latency_or_spec_still_builds(sweep_dir):
    (sweep_dir / "latency.json").unlink()
    (sweep_dir / "state.json").unlink()
    frame = results_table.read_results(sweep_dir / results_table.RESULTS_FILE)
    frame["latency_ms"] = float("nan")
    results_table.write(sweep_dir / results_table.RESULTS_FILE, frame)
    files = rebuild_report(sweep_dir)
    md = files.markdown.read_text()
    assert md.startswith("# Sweep demo")  # the folder's name stands in for the spec's
    assert "latency not measured" in md and "batch 32 × 64 tokens on cpu (not measured yet)" in md  # the default settings
    assert "**Teacher** tiny-teacher: accuracy 0.9000 · latency not measured" in md  # named by the students' drydock.json
    assert "**Champion** (best mean metric on the front (no latency budget)): none" in md
    assert files.plot.stat().st_size > 5000
    assert "Pareto front: empty" in pareto_table_text(frame)


def test_pareto_table_text_follows_the_pareto_column(sweep_dir):
    frame = results_table.read_results(sweep_dir / results_table.RESULTS_FILE)
    from pipeline.config import SelectionConfig
    from pipeline.select.pareto import select

    marked = select(frame, SelectionConfig()).frame
    text = pareto_table_text(marked)
    assert "finetune num_layers=1" in text and "kd alpha=0.5" in text and "◆" not in text
    with_budget = pareto_table_text(marked, SelectionConfig(max_latency_ms=3.0))
    assert "◆ champion: finetune num_layers=1" in with_budget


def test_report_of_a_folder_without_results_is_a_user_error(tmp_path):
    with pytest.raises(DrydockError, match="no results table"):
        run_cli(["report", str(tmp_path)])


def test_the_latency_line_names_the_nodes_and_the_untimed_seeds(sweep_dir):
    from pipeline.measure.latency import load_record

    record = load_record(sweep_dir)
    on = {node: measurement("teacher", p50).model_copy(update={"node_id": node, "hostname": f"gpu-{node}"})
          for node, p50 in (("n1", 10.0), ("n2", 10.4))}
    save_record(sweep_dir, record.model_copy(update={"teachers": on, "teacher": on["n1"],
                                                     "not_timed": {"kd-alpha0.5-s1": "kd-alpha0.5-s0"}}))
    md = rebuild_report(sweep_dir).markdown.read_text()
    assert ("Latency: batch 8 × 32 tokens on Test CPU 9000 (cpu, 2 threads, torch 2.13.0); p50 / p90 in ms. "
            "Timed in parallel on 2 node(s) (gpu-n1, gpu-n2), the teacher on each (p50 10.00–10.40 ms); "
            "every speedup is against the teacher on the student's own node. One export per configuration was timed, "
            "the seed the registry serves (1 other seed(s) untimed; `selection.latency.all_seeds: true` times every seed).") in md
    # read off the variants' interleaved timing: one process, within-round speedups, said so
    save_record(sweep_dir, record.model_copy(update={"teachers": {"n1": on["n1"]}, "teacher": on["n1"], "interleaved": True}))
    md = rebuild_report(sweep_dir).markdown.read_text()
    assert ("p50 / p90 in ms. Timed once, interleaved with every runtime variant in one process on gpu-n1 (the Runtimes "
            "section's `torch` rows); every speedup is the median over rounds of the within-round ratio to the teacher.") in md
    assert "Timed in parallel" not in md


# --- pareto.png with the runtimes (variants.parquet) -------------------------------------------

NAN = float("nan")


def eager_frame() -> pd.DataFrame:
    rows = []
    for name, alpha, metric, latency in (("s0", 0.5, 0.85, 4.0), ("s1", 0.9, 0.86, 4.2)):
        row = results_table.trial_row(name, "kd", 0, {"alpha": alpha}, "finished",
                                      {"metric": metric, "metric_name": "accuracy", "teacher_metric": 0.9,
                                       "num_params": 50_000, "student_path": f"/nowhere/{name}"})
        row.update(latency_ms=latency, latency_p90_ms=latency * 1.1, speedup=10.0 / latency)
        rows.append(row)
    return results_table.to_frame(rows)


def variants_frame() -> pd.DataFrame:
    """variants.parquet's columns at one shape (8x32): (trial, runtime, metric, p50, low, high, pareto[, error])."""
    rows = [(TEACHER, "torch", 0.90, 10.0, 9.5, 10.6, None), (TEACHER, INT8, 0.89, 5.0, 4.8, 5.3, None),
            ("s0", "torch", 0.85, 4.0, 3.8, 4.3, False), ("s0", INT8, 0.84, 2.0, 1.9, 2.2, True),
            ("s1", "torch", 0.86, 4.1, 3.9, 4.4, True), ("s1", INT8, 0.83, 2.1, 2.0, 2.3, False),
            ("s2", INT8, NAN, NAN, NAN, NAN, None, "RuntimeError: the exporter gave up")]
    return typed(pd.DataFrame([
        {"trial_id": r[0], "runtime": r[1], "metric_name": "accuracy", "metric": r[2], "latency_ms": r[3],
         "latency_low_ms": r[4], "latency_high_ms": r[5], "pareto": r[6], "error": r[7] if len(r) > 7 else None,
         "front_shape": "8x32", "device": "cpu", "threads": 2, "size_bytes": 1000} for r in rows]))


def series(ax) -> dict:
    """Each errorbar series of a panel by its label: (x, y, the ends of its x bars flattened, marker)."""
    out = {}
    for container in ax.containers:
        line, _, bars = container.lines
        ends = [x for segment in bars[0].get_segments() for x in (segment[0][0], segment[1][0])] if bars else []
        out[container.get_label()] = (list(line.get_xdata()), list(line.get_ydata()), ends, line.get_marker())
    return out


def test_pareto_png_draws_each_runtime_as_its_own_series_beside_the_eager_panel():
    frame, table = eager_frame(), variants_frame()
    ctx = ReportContext(sweep="demo", selection=SelectionConfig(max_latency_ms=3.0), variants=table)
    fig = pareto_figure(select(frame, ctx.selection), frame, ctx)
    eager, runtimes = fig.axes
    assert tuple(fig.get_size_inches()) == (15, 5.5) and eager.get_shared_y_axes().joined(eager, runtimes)
    assert {t.get_text() for t in eager.get_legend().get_texts()} == {
        "kd", "Pareto front", "teacher (latency not measured)", "latency budget"}  # as without variants
    assert {t.get_text() for t in runtimes.get_legend().get_texts()} == {
        "torch", INT8, "variant front", f"{TEACHER} · torch", f"{TEACHER} · {INT8}", "latency budget"}

    drawn = series(runtimes)
    assert set(drawn) == {"torch", INT8, f"{TEACHER} · torch", f"{TEACHER} · {INT8}"}
    for label, trials, runtime in (("torch", ["s0", "s1"], "torch"), (INT8, ["s0", "s1"], INT8),  # s2's int8 failed
                                   (f"{TEACHER} · torch", [TEACHER], "torch"), (f"{TEACHER} · {INT8}", [TEACHER], INT8)):
        rows = table[table["trial_id"].isin(trials) & (table["runtime"] == runtime)]
        x, y, ends, _ = drawn[label]
        assert x == list(rows["latency_ms"]) and y == list(rows["metric"])
        interval = [x for low, high in zip(rows["latency_low_ms"], rows["latency_high_ms"]) for x in (low, high)]
        assert ends == pytest.approx(interval)  # the ~95% interval: low, high of each point
    assert [drawn[label][3] for label in ("torch", INT8)] == ["o", "s"]
    assert {drawn[f"{TEACHER} · {runtime}"][3] for runtime in ("torch", INT8)} == {"*"}
    (front,) = [line for line in runtimes.get_lines() if line.get_label() == "variant front"]
    # the front the registry serves, marked again under the 3 ms budget: s0/int8 alone (s1/torch,
    # marked in the table's own column, is over the budget)
    assert list(front.get_xdata()) == [2.0] and list(front.get_ydata()) == [0.84]
    assert "8x32" in runtimes.get_xlabel() and "cpu, 2 threads" in runtimes.get_xlabel()
    # the champion the registry offers the alias to is the variants' (s0 in int8, within the 3 ms
    # budget): the runtimes panel names it, the eager panel names none
    assert [(t.get_text(), t.xy) for t in runtimes.texts] == [(f"champion ({INT8})", (2.0, 0.84))]
    assert [t.get_text() for t in eager.texts] == []

    # without variants: the eager panel alone, as before
    alone = pareto_figure(select(frame, ctx.selection), frame, ReportContext(sweep="demo", selection=ctx.selection))
    assert len(alone.axes) == 1 and tuple(alone.get_size_inches()) == (8, 5.5)
    assert [c.get_label() for c in alone.axes[0].containers] == ["kd"]
    # no budget: an eager champion exists (s1); alone, the eager panel names it, and beside the
    # runtimes it is left to that panel, which names the variants' (s1 in torch, the most accurate)
    free = SelectionConfig()
    assert select(frame, free).champion["best_trial_id"] == "s1"
    alone = pareto_figure(select(frame, free), frame, ReportContext(sweep="demo", selection=free))
    assert [(t.get_text(), t.xy) for t in alone.axes[0].texts] == [("champion", (4.2, 0.86))]
    eager, runtimes = pareto_figure(select(frame, free), frame, ReportContext(sweep="demo", selection=free, variants=table)).axes
    assert [t.get_text() for t in eager.texts] == [] and [t.get_text() for t in runtimes.texts] == ["champion (torch)"]


def test_the_report_with_variants_writes_the_wider_plot(tmp_path):
    from matplotlib.image import imread

    frame = eager_frame()
    files = write_report(tmp_path, frame, ReportContext(sweep="demo", selection=SelectionConfig(), variants=variants_frame()))
    assert imread(files.plot).shape[:2] == (660, 1800)  # 15 × 5.5 in at 120 dpi
    assert "## Runtimes" in files.markdown.read_text()
