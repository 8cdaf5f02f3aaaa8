"""The measure-and-select stage: latency → Pareto selection → report → registry.

It runs after the search, on the sweep's current results.parquet, in the sweep's driver process
(which owns every MLflow run: `pipeline.tracking`). The order matters:

1. measure — the teacher and every finished trial's exported student, one whole node at a time
   (`pipeline.select.latency`), so every latency and speedup comes from the same kind of machine;
2. select — pure functions over the table (`pipeline.select.pareto`); results.parquet is rewritten
   atomically with latency_ms, latency_p90_ms, speedup and pareto filled, and latency.json keeps
   the teacher's timing so `drydock report` can rebuild the report later;
3. report — report.md / report.html / pareto.png / pareto.csv in the sweep folder, logged to the
   sweep's parent run with latency.json and the updated results table;
4. registry — each Pareto configuration's best seed becomes a model version, and the champion
   alias moves only if the new champion beats the current one, or the current one is outside
   this sweep's latency budget (the policy: `pipeline.select.champion`; the MLflow side:
   `pipeline.select.registry`).

The files come before the registry so that a registry outage still leaves a complete,
inspectable sweep folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from pipeline import results as results_table
from pipeline.config import SweepSpec
from pipeline.prepare.data import task_spec
from pipeline.select.latency import TEACHER, LatencyRecord, Measurement, fill_latency, measure_all, save_record
from pipeline.select.pareto import select
from pipeline.select.registry import register_front
from pipeline.select.report import ReportContext, write_report
from pipeline.tracking import SweepTracker


def student_targets(frame: pd.DataFrame, workdir: Path) -> dict[str, Path]:
    """trial_id → export folder, for finished trials whose folder exists (relative paths are
    taken from the work directory)."""
    targets: dict[str, Path] = {}
    finished = frame[(frame["status"] == "finished").fillna(False) & frame["student_path"].notna()]
    for _, row in finished.iterrows():
        path = Path(str(row["student_path"]))
        path = path if path.is_absolute() else workdir / path
        if (path / "config.json").is_file():
            targets[str(row["trial_id"])] = path
    return targets


def log_trial_latency(tracker: SweepTracker, frame: pd.DataFrame, students: dict[str, Measurement]) -> None:
    """Each trial's run gets its figures with the device they were measured on."""
    for _, row in frame.iterrows():
        run_id, m = row["mlflow_run_id"], students.get(str(row["trial_id"]))
        if m is None or pd.isna(run_id):
            continue
        metrics = {"latency/p50_ms": m.p50_ms, "latency/p90_ms": m.p90_ms, "latency/mean_ms": m.mean_ms,
                   "latency/throughput": m.throughput}
        if pd.notna(row["speedup"]):
            metrics["latency/speedup"] = float(row["speedup"])
        tracker.log_metrics(str(run_id), metrics, 0)
        tags = {
            "drydock.latency.device": m.description, "drydock.latency.batch_size": m.batch_size,
            "drydock.latency.seq_length": m.seq_length, "drydock.latency.threads": m.threads,
            "drydock.latency.torch": m.torch_version, "drydock.latency.host": m.hostname,
        }
        if not pd.isna(row["pareto"]):
            tags["drydock.pareto"] = str(bool(row["pareto"])).lower()
        tracker.set_tags(str(run_id), tags)


def select_stage(
    spec: SweepSpec,
    workdir: Path,
    sweep_dir: Path,
    tracker: SweepTracker,
    teacher_path: Path | None,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Measure, select, report and register for the sweep's current results; returns the table."""
    results_path = sweep_dir / results_table.RESULTS_FILE
    frame = results_table.read_results(results_path)
    students = student_targets(frame, workdir)
    if not students:
        log("select: no finished trial with an exported student; nothing to measure or register")
    settings = spec.selection.latency

    # 1. measure: the teacher first, then every student, on the same kind of node
    targets = ({TEACHER: Path(teacher_path)} if teacher_path is not None else {}) | students
    measured, errors = measure_all(targets, settings, log) if students else ({}, {})
    teacher = measured.pop(TEACHER, None)
    frame = fill_latency(frame, measured, teacher)

    # 2. select, and rewrite the table with every selection column filled
    chosen = select(frame, spec.selection)
    frame = chosen.frame
    results_table.write(results_path, frame)
    record = LatencyRecord(settings=settings, teacher=teacher, teacher_name=spec.teacher.model, students=measured, errors=errors)
    latency_file = save_record(sweep_dir, record)
    log_trial_latency(tracker, frame, measured)

    # 3. report
    files = write_report(sweep_dir, frame, ReportContext(spec.name, spec.selection, spec.teacher.model, record), chosen)
    for path in files.all():
        tracker.log_parent_artifact(path, "report")
    tracker.log_parent_artifact(latency_file)
    tracker.log_parent_artifact(results_path)
    summary = {"select/pareto_size": float(len(chosen.front)), "select/configurations": float(len(chosen.configs))}
    if teacher is not None:
        summary.update({"teacher/latency_ms": teacher.p50_ms, "teacher/latency_p90_ms": teacher.p90_ms})
    if chosen.champion is not None:
        summary.update({"champion/metric": float(chosen.champion["metric_mean"]), "champion/latency_ms": float(chosen.champion["best_latency_ms"])})
    tracker.log_parent(metrics=summary)
    log(f"select: {len(chosen.front)} Pareto configuration(s) of {len(chosen.configs)}; report {files.markdown}, plot {files.plot}")

    # 4. registry
    if len(chosen.front):
        outcome = register_front(
            tracker.uri, spec.registered_model_name, chosen.front, chosen.champion,
            sweep=spec.name, experiment_id=tracker.experiment_id, measurements=measured,
            max_length=spec.task.max_seq_length, pair=task_spec(spec.task).is_pair, budget=spec.selection, log=log,
        )
        if outcome.decision is not None and tracker.parent_id:
            tracker.set_tags(tracker.parent_id, {
                "drydock.registered_model": spec.registered_model_name,
                "drydock.champion_version": outcome.decision.version or "",
                "drydock.champion_decision": outcome.decision.reason,
            })
    if chosen.champion is None and len(chosen.configs):
        log("select: no Pareto configuration's registered seed meets the latency budget; the champion alias is left alone")
    return frame
