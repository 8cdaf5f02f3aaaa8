"""Every run of a sweep keeps its own report files (`<sweep>/runs/<run id>/`: report.md,
report.html, pareto.png, pareto.csv, latency.json); the sweep's top level holds copies of the
newest run's, so a new run no longer overwrites the previous run's report while keeping its table."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pipeline import results as results_table
from pipeline.cli.outputs import COMMANDS, add_commands
from pipeline.config import LatencyConfig, spec_from_dict, spec_to_dict
from pipeline.measure.latency import LatencyRecord, Measurement, save_record
from pipeline.select.report import rebuild_report

NAMES = ("report.md", "report.html", "pareto.png", "pareto.csv")
SETTINGS = LatencyConfig(batch_size=8, seq_length=32)
SPEC = spec_from_dict({
    "name": "demo", "task": {"name": "sst2", "source": "synthetic"},
    "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 100}},
    "selection": {"latency": SETTINGS.model_dump()},
})


def measurement(path: str, p50: float) -> Measurement:
    return Measurement(path=path, p50_ms=p50, p90_ms=p50 * 1.1, mean_ms=p50, throughput=8000 / p50, runs=20, warmup=3,
                       batch_size=8, seq_length=32, device="cpu", device_name="Test CPU", threads=1,
                       torch_version="2.0", num_params=50_000, hostname="box")


def rows(metric: float, latency: float | None) -> list[dict]:
    out = []
    for seed in (0, 1):
        row = results_table.trial_row(f"finetune-s{seed}", "finetune", seed, {"num_layers": 1}, "finished",
                                      {"metric": metric + 0.01 * seed, "metric_name": "accuracy", "teacher_metric": 0.9,
                                       "num_params": 50_000, "student_path": f"/nowhere/finetune-s{seed}/student"})
        if latency is not None:
            row.update(latency_ms=latency, latency_p90_ms=latency * 1.1, speedup=10.0 / latency)
        out.append(row)
    return out


def start_run(sweep_dir: Path, run_id: str, metric: float, teacher_p50: float) -> None:
    """What the sweep leaves before its select stage: the previous run's table moved into that
    run's folder (`pipeline.search.state.start_run`), this run's state, spec and table."""
    state = sweep_dir / "state.json"
    if state.is_file():
        previous = json.loads(state.read_text())["run_id"]
        os.replace(sweep_dir / results_table.RESULTS_FILE, sweep_dir / "runs" / previous / results_table.RESULTS_FILE)
    (sweep_dir / "runs" / run_id).mkdir(parents=True)
    state.write_text(json.dumps({"run_id": run_id}))
    (sweep_dir / "runs" / run_id / "spec.json").write_text(json.dumps(spec_to_dict(SPEC)))
    results_table.write(sweep_dir / results_table.RESULTS_FILE, results_table.to_frame(rows(metric, 2.0)))
    save_record(sweep_dir / "runs" / run_id, LatencyRecord(settings=SETTINGS, teacher=measurement("teacher", teacher_p50),
                                                           teacher_name="tiny-teacher"))


def test_drydock_report_keeps_each_runs_report_and_points_the_top_level_at_the_newest(tmp_path):
    sweep_dir = tmp_path / "demo"
    start_run(sweep_dir, "r1", metric=0.61, teacher_p50=10.0)
    rebuild_report(sweep_dir)
    first = {name: (sweep_dir / "runs" / "r1" / name).read_bytes() for name in NAMES}
    assert "0.6150 ± 0.0071 (n=2)" in first["report.md"].decode() and "latency 10.00 ms" in first["report.md"].decode()

    start_run(sweep_dir, "r2", metric=0.71, teacher_p50=20.0)
    files = rebuild_report(sweep_dir)
    assert files.markdown == sweep_dir / "report.md"  # where readers have always found it
    for name in NAMES:  # the first run's report is its own still
        assert (sweep_dir / "runs" / "r1" / name).read_bytes() == first[name], name
        assert (sweep_dir / name).read_bytes() == (sweep_dir / "runs" / "r2" / name).read_bytes(), name
    newest = (sweep_dir / "report.md").read_text()
    assert "0.7150 ± 0.0071 (n=2)" in newest and "latency 20.00 ms" in newest  # r2's latency.json, not another's

    # an older run's report is rebuilt in its own folder, from its own table, spec and latency.json
    (sweep_dir / "runs" / "r1" / "report.md").unlink()
    rebuild_report(sweep_dir / "runs" / "r1")
    assert (sweep_dir / "runs" / "r1" / "report.md").read_bytes() == first["report.md"]
    assert (sweep_dir / "report.md").read_text() == newest


def test_the_cli_says_where_the_runs_own_copy_is(tmp_path, capsys):
    sweep_dir = tmp_path / "demo"
    start_run(sweep_dir, "r1", metric=0.61, teacher_p50=10.0)
    parser = argparse.ArgumentParser(prog="drydock")
    add_commands(parser.add_subparsers(dest="command", required=True))
    assert COMMANDS["report"](parser.parse_args(["report", str(sweep_dir)])) == 0
    printed = capsys.readouterr().out
    assert str(sweep_dir / "report.md") in printed and str(sweep_dir / "runs" / "r1") in printed


def test_figures_print_with_their_digits_and_a_dash_when_missing():
    from pipeline.select.report import DASH, fmt, fmt_diff, fmt_latency, fmt_mean_std, fmt_params, fmt_speedup

    assert fmt_mean_std(0.8123, 0.0042, 3) == "0.8123 ± 0.0042 (n=3)"
    assert fmt_mean_std(0.8, float("nan"), 1) == "0.8000 (n=1)"  # one seed: no spread
    assert (fmt_params(4_385_920), fmt_params(50_000)) == ("4.39M", "50,000")
    assert (fmt_latency(2.0, 2.5), fmt_latency(2.0, None), fmt_latency(None, 2.5)) == ("2.00 / 2.50", "2.00", DASH)
    assert (fmt_speedup(3.456), fmt(None), fmt(0.5, 2)) == ("3.46×", DASH, "0.50")
    assert fmt_diff(0.01, -0.002, 0.022) == ("+0.0100", "[-0.0020, +0.0220]")


def test_the_report_names_the_champion_the_registry_serves_when_it_is_an_int8_variant(tmp_path):
    """With runtime variants the alias goes to the served variants' champion (`served_champion`);
    the report's champion line and its ◆ marks say so, rather than naming the eager front's most
    accurate configuration, which the registry does not serve as champion."""
    from pipeline.config import SelectionConfig
    from pipeline.select.pareto import select
    from pipeline.select.report import ReportContext, write_report
    from tests.unit.cli.test_tables import _timed_frame
    from tests.unit.select.test_variants import table

    frame = _timed_frame([("kd-a-s0", {"alpha": 0.5}, 0.86, 4.0), ("kd-b-s0", {"alpha": 0.9}, 0.84, 3.0)])
    variants = table({"kd-a-s0/torch": (0.86, 4.0, 3.8, 4.2), "kd-a-s0/onnxruntime-int8": (0.85, 2.0, 1.9, 2.1),
                      "kd-b-s0/torch": (0.84, 3.0, 2.9, 3.1), "kd-b-s0/onnxruntime-int8": (0.87, 2.1, 2.0, 2.2)})
    assert select(frame, SelectionConfig()).champion["config"] == "kd alpha=0.5"  # the eager rule's
    ctx = ReportContext(sweep="demo", selection=SelectionConfig(), variants=variants)
    md = write_report(tmp_path, frame, ctx).markdown.read_text()
    (line,) = [text for text in md.splitlines() if text.startswith("**Champion**")]
    assert "kd alpha=0.9 in onnxruntime-int8" in line and "0.8700" in line and "2.10" in line and "kd-b-s0" in line
    section = md.split("## All configurations", 1)[1].split("##", 1)[0]
    assert [row for row in section.splitlines() if row.startswith("|") and "◆" in row] == []  # no eager row is served as champion


def test_with_every_seed_timed_the_runtimes_section_marks_the_front_the_registry_serves(tmp_path):
    """`selection.latency.all_seeds` times a configuration's weaker seed too, and its int8
    variant may look best; the registry serves only each configuration's best seed, so the
    Runtimes table's ★ and its stack line must not name the weaker seed's variant."""
    from pipeline.config import SelectionConfig
    from pipeline.select.report import ReportContext, write_report
    from tests.unit.cli.test_tables import _timed_frame
    from tests.unit.select.test_variants import table

    frame = _timed_frame([("kd-a-s0", {"alpha": 0.5}, 0.86, 4.0), ("kd-a-s1", {"alpha": 0.5}, 0.84, 4.0)])
    variants = table({"kd-a-s0/torch": (0.86, 4.0, 3.8, 4.2), "kd-a-s0/onnxruntime-int8": (0.85, 2.0, 1.9, 2.1),
                      "kd-a-s1/torch": (0.84, 4.0, 3.8, 4.2), "kd-a-s1/onnxruntime-int8": (0.88, 1.0, 0.9, 1.1)})
    ctx = ReportContext(sweep="demo", selection=SelectionConfig(), variants=variants)
    md = write_report(tmp_path, frame, ctx).markdown.read_text()
    section = md.split("## Runtimes", 1)[1].split("\n## ", 1)[0]
    starred = [row.split("|")[1].strip() + "/" + row.split("|")[2].strip() for row in section.splitlines()
               if row.startswith("|") and "★" in row]
    assert starred and all(name.startswith("kd-a-s0/") for name in starred)
    assert "champion's configuration, kd-a-s0/" in section  # the stack line's student
