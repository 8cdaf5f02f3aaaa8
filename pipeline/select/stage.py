"""The measure-and-select stage: latency → Pareto selection → report → registry.

It runs after the search, on the sweep's current results.parquet, in the sweep's driver process
(which owns every MLflow run: `pipeline.tracking`). The order matters:

1. measure, once — the teacher and, of each configuration, the export the registry would serve
   (every finished trial's with `selection.latency.all_seeds`; `pipeline.select.pareto.latency_plan`).
   When the spec asks for more than eager fp32 at one shape, that is the runtime variants job
   (below), and the eager figures are its `torch` rows (`pipeline.measure.eager`): each model is
   timed once. Otherwise (or when that job cannot run at all) eager fp32 alone, in parallel on
   whole nodes of one device model, the teacher on each node, every speedup against its own
   node's teacher (`pipeline.measure.latency`).
   The runtime variants job (`pipeline.measure.job`): the teacher and every planned student in
   each runtime of `selection.runtimes`, checked against eager fp32, scored on the dev set and
   timed interleaved in one process at every shape of `selection.latency.shapes`, into
   variants.parquet with its own front (`pipeline.select.variants`). A variant that fails is
   a row with its error; the step failing as a whole is a log line. Neither stops the stage;
2. select — pure functions over the table (`pipeline.select.pareto`); results.parquet is rewritten
   atomically with latency_ms, latency_p90_ms, speedup and pareto filled, and latency.json keeps
   the teacher's timing so `drydock report` can rebuild the report later.
3. report — report.md / report.html / pareto.png / pareto.csv (with a Runtimes section from
   variants.parquet), with latency.json and variants.parquet, in the run's
   own folder `runs/<run id>/` (a later run never overwrites them) and copied to the top of the
   sweep folder (the newest run's: `pipeline.select.report.publish_latest`), logged to the
   sweep's parent run with the updated results table;
4. registry — each Pareto configuration's best seed becomes a model version, and the champion
   alias moves only if the new champion beats the current one on the same dev set (re-scored on
   this sweep's when the champion's numbers came from other rows), or the current one is outside
   this sweep's latency budget (the policy: `pipeline.select.champion`; the MLflow side:
   `pipeline.select.registry`; the dev set's identity: `pipeline.select.dev_set`). With
   variants built, the registry serves what was measured: the front over (served export,
   runtime) is registered too, ONNX variants as ONNX Runtime models, and the alias is offered
   to that front's champion (`pipeline.select.variant_registry`).

The files come before the registry so that a registry outage still leaves a complete,
inspectable sweep folder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline import results as results_table
from pipeline.config import SelectionConfig, SweepSpec
from pipeline.measure.eager import eager_view
from pipeline.measure.job import DevRows, Log, VariantOutcome, failure, run_variant_job, variant_job, variants_wanted
from pipeline.measure.latency import (
    LatencyRecord,
    Measurement,
    Timings,
    card_latency,
    fill_latency,
    measure_all,
    on_one_node,
    save_record,
    student_targets,
)
from pipeline.measure.table import variants_path, write_variants
from pipeline.prepare.tasks import task_spec
from pipeline.select.dev_set import DEV_SPLIT, DevSet, dev_set_of
from pipeline.select.evaluate import evaluate, labelled_split
from pipeline.select.pareto import Selection, latency_plan, select, served_by
from pipeline.select.registry import Rescore, register_front
from pipeline.select.report import ReportContext, ReportFiles, current_run_dir, publish_latest, write_report
from pipeline.select.variant_registry import VariantFront
from pipeline.select.variants import has_variants, served_champion, variant_rows
from pipeline.storage import WorkStore
from pipeline.tracking import SweepTracker


def log_trial_latency(tracker: SweepTracker, frame: pd.DataFrame, students: dict[str, Measurement],
                      teachers: dict[str, Measurement] | None = None) -> None:
    """Each timed trial's run gets its figures with the device model and node they were measured
    on, and the teacher's p50 on that node (the reference of a speedup timed alone; an
    interleaved one is the median within-round ratio); every candidate's run gets its
    configuration's Pareto mark, timed or not."""
    teachers = teachers or {}
    for _, row in frame.iterrows():
        run_id, m = row["mlflow_run_id"], students.get(str(row["trial_id"]))
        if pd.isna(run_id):
            continue
        tags: dict[str, object] = {}
        if m is not None:
            metrics = {"latency/p50_ms": m.p50_ms, "latency/p90_ms": m.p90_ms, "latency/mean_ms": m.mean_ms,
                       "latency/throughput": m.throughput}
            if pd.notna(row["speedup"]):
                metrics["latency/speedup"] = float(row["speedup"])
            if m.node_id in teachers:
                metrics["latency/teacher_p50_ms"] = teachers[m.node_id].p50_ms
            tracker.log_metrics(str(run_id), metrics, 0)
            tags = {
                "drydock.latency.device": m.description, "drydock.latency.device_name": m.device_name,
                "drydock.latency.batch_size": m.batch_size, "drydock.latency.seq_length": m.seq_length,
                "drydock.latency.threads": m.threads, "drydock.latency.torch": m.torch_version,
                "drydock.latency.host": m.hostname,
            }
            if m.node_id:
                tags["drydock.latency.node_id"] = m.node_id
        if not pd.isna(row["pareto"]):
            tags["drydock.pareto"] = str(bool(row["pareto"])).lower()
        if tags:
            tracker.set_tags(str(run_id), tags)


def judging(spec: SweepSpec, tracking_uri: str, log: Callable[[str], None]) -> tuple[DevSet | None, Rescore | None]:
    """This sweep's dev set, and how to score a registered version on it (the consumer's loader,
    `drydock eval`'s path), for the champion to be judged on the same rows as its challenger.
    A dev set that cannot be read again (its source gone since the sweep prepared it) leaves the
    versions without data tags and the decision on recorded figures, as before, and says so."""
    try:
        rows = labelled_split(spec, DEV_SPLIT)  # read as the sweep read them
        dev, name = dev_set_of(spec, rows), spec.registered_model_name
    except Exception as e:  # noqa: BLE001 - registering must not fail on it: fall back, and say so
        log(f"registry: the dev set cannot be read again ({type(e).__name__}: {e}); versions are compared on their "
            "recorded metrics")
        return None, None

    def rescore(version: str) -> float:
        ref = f"models:/{name}/{version}"
        result = evaluate(ref, spec, DEV_SPLIT, tracking_uri, rows=rows)
        log(f"registry: {ref} scores {result.primary_metric} {result.metrics[result.primary_metric]:.4f} "
            f"on this sweep's dev set ({dev.describe()})")
        return result.metrics[result.primary_metric]

    return dev, rescore


def _kept_at(path: Path, store: WorkStore | None) -> str:
    """Where `path` is kept: its address in the work location when that is a URI."""
    return str(path) if store is None else store.address(path)


def select_stage(
    spec: SweepSpec,
    workdir: Path,
    sweep_dir: Path,
    tracker: SweepTracker,
    teacher_path: Path | None,
    log: Callable[[str], None] = print,
    *,
    store: WorkStore | None = None,
) -> pd.DataFrame:
    """Measure, select, report and register for the sweep's current results; returns the table.
    `store`: the work location, when the models live there (a measuring node fetches them)."""
    results_path = sweep_dir / results_table.RESULTS_FILE
    frame = results_table.read_results(results_path)
    settings = spec.selection.latency
    planned = latency_plan(frame, settings.all_seeds)  # only these exports are fetched and timed
    students = student_targets(frame[frame["trial_id"].astype(str).isin(planned)], workdir, store)
    if not students:
        log("select: no finished trial with an exported student; nothing to measure or register")

    # every run keeps its own latency.json and report files, in runs/<run id>/; the sweep's top
    # level gets copies, the newest run's (a folder without a recorded run: the top level only)
    run_dir = current_run_dir(sweep_dir)
    out_dir = run_dir if run_dir is not None else sweep_dir
    out_dir.mkdir(parents=True, exist_ok=True)

    # 1. measure, once: with runtime variants wanted, the variants job times every model in every
    # runtime and results.parquet's eager figures are its torch rows (`pipeline.measure.eager`);
    # else (or when that job fails as a whole) the teacher on every node used, then the planned
    # students, on nodes of one device model
    teacher_folder = Path(teacher_path) if teacher_path is not None else None
    timings, speedups, variants = measure_once(spec, students, teacher_folder, out_dir, log, store)
    measured, teacher = timings.students, timings.teacher
    frame = fill_latency(frame, measured, timings.teachers, speedups)
    card_latency(frame, students, measured)

    # 2. select, and rewrite the table with every selection column filled
    chosen = select(frame, spec.selection)
    frame = chosen.frame
    results_table.write(results_path, frame)
    # the seeds left untimed, each with the one its configuration serves (their columns stay empty)
    not_timed = {} if settings.all_seeds else {t: s for t, s in served_by(frame).items() if t != s}
    record = LatencyRecord(settings=settings, teacher=teacher, teachers=timings.teachers, teacher_name=spec.teacher.model,
                           students=measured, errors=timings.errors, not_timed=not_timed, interleaved=variants is not None)
    latency_file = save_record(out_dir, record)
    log_trial_latency(tracker, frame, measured, timings.teachers)

    # 3. report
    context = ReportContext(spec.name, spec.selection, spec.teacher.model, record, variants)
    publish(sweep_dir, run_dir, out_dir, frame, chosen, context, tracker, log, store,
            [latency_file] + ([variants_path(out_dir)] if variants is not None else []))

    # 4. registry
    if len(chosen.front):
        dev, rescore = judging(spec, tracker.uri, log)
        outcome = register_front(
            tracker.uri, spec.registered_model_name, chosen.front, chosen.champion, sweep=spec.name,
            experiment_id=tracker.experiment_id, measurements=measured, max_length=spec.task.max_seq_length,
            pair=task_spec(spec.task).is_pair, budget=spec.selection, log=log,
            localize=store.localize if store is not None else Path, dev=dev, rescore=rescore,
            variants_front=VariantFront(variants, chosen.configs, spec.selection) if variants is not None else None)
        if outcome.decision is not None and tracker.parent_id:
            tracker.set_tags(tracker.parent_id, {
                "drydock.registered_model": spec.registered_model_name,
                "drydock.champion_version": outcome.decision.version or "",
                "drydock.champion_decision": outcome.decision.reason,
            })
    # with variants the registry chose among them and said so (a variant may be within the budget)
    if chosen.champion is None and len(chosen.configs) and variants is None:
        log("select: no Pareto configuration's registered seed meets the latency budget; the champion alias is left alone")
    return frame


def measure_once(spec: SweepSpec, students: Mapping[str, Path], teacher: Path | None, out_dir: Path, log: Log,
                 store: WorkStore | None) -> tuple[Timings, dict[str, float], pd.DataFrame | None]:
    """The stage's one measurement: (eager timings, their within-round speedups where the
    variants job gave them, the variants table or None). Variants wanted: the job times every
    model in every runtime and the eager figures are its torch rows; else, or when the job fails
    as a whole, eager fp32 alone (`measure_all`)."""
    settings = spec.selection.latency
    if students and variants_wanted(spec.selection):  # without a teacher it says why no variants were built
        step = variants_step(spec, students, teacher, out_dir, log, store=store)
        if step is not None and teacher is not None:
            timings, speedups = eager_view(step.outcome, students, teacher, settings)
            log(f"latency: eager fp32 from the variants' timing at {settings.batch_size}x{settings.seq_length} "
                f"(interleaved): {_eager_line(timings)}")
            return timings, speedups, step.table
    timings = measure_all(students, settings, log, teacher=teacher, store=store) if students else Timings()
    return timings, {}, None


def publish(sweep_dir: Path, run_dir: Path | None, out_dir: Path, frame: pd.DataFrame, chosen: Selection,
            context: ReportContext, tracker: SweepTracker, log: Callable[[str], None], store: WorkStore | None,
            records: list[Path]) -> None:
    """The report files in `out_dir`, copied with `records` (latency.json, variants.parquet) to
    the sweep's top level when `out_dir` is a run's own folder; all logged to the parent run with
    the results table, and the summary metrics."""
    files = write_report(out_dir, frame, context, chosen)
    latest = ReportFiles.of(sweep_dir)
    if run_dir is not None:  # together: the top level holds one run's set, the newest complete one
        publish_latest([*files.all(), *records], sweep_dir)
        if variants_path(out_dir) not in records:  # an older run's variants must not pass for this run's
            stale = variants_path(sweep_dir)
            key = store.key_of(stale) if store is not None and store.is_remote else None
            if store is not None and key is not None:
                store.delete(key)  # the store's copy too: the sweep's files are pushed, never pruned
            else:
                stale.unlink(missing_ok=True)
    for path in files.all():
        tracker.log_parent_artifact(path, "report")
    for path in records:
        tracker.log_parent_artifact(path)
    tracker.log_parent_artifact(sweep_dir / results_table.RESULTS_FILE)
    summary = {"select/pareto_size": float(len(chosen.front)), "select/configurations": float(len(chosen.configs))}
    teacher = context.teacher
    if teacher is not None:
        summary.update({"teacher/latency_ms": teacher.p50_ms, "teacher/latency_p90_ms": teacher.p90_ms})
    served = served_champion(context.variants, chosen.configs, context.selection)
    if served is not None:  # the alias's candidate is a variant: its own dev score and timing
        summary.update({"champion/metric": float(served["metric"]), "champion/latency_ms": float(served["latency_ms"])})
    elif chosen.champion is not None and not has_variants(context.variants):
        summary.update({"champion/metric": float(chosen.champion["metric_mean"]), "champion/latency_ms": float(chosen.champion["best_latency_ms"])})
    tracker.log_parent(metrics=summary)
    shown = lambda p: _kept_at(p, store)  # where they will be kept
    kept = f" (this run's own in {shown(run_dir)})" if run_dir is not None else ""
    log(f"select: {len(chosen.front)} Pareto configuration(s) of {len(chosen.configs)}; "
        f"report {shown(latest.markdown)}, plot {shown(latest.plot)}{kept}")


def _eager_line(timings: Timings) -> str:
    teacher = timings.teacher
    parts = [f"teacher p50 {teacher.p50_ms:.2f} ms"] if teacher is not None else []
    parts += [f"{key} p50 {m.p50_ms:.2f} ms" + (f" (as {m.measured_as})" if m.measured_as else "")
              for key, m in timings.students.items()]
    parts += [f"{key} not timed ({why[:120]})" for key, why in timings.errors.items()]
    return "; ".join(parts)


@dataclass(frozen=True)
class VariantStep:
    """The variants step's table (variants.parquet) and the job's outcome it was made of, whose
    torch timings are results.parquet's eager figures (`pipeline.measure.eager`)."""

    table: pd.DataFrame
    outcome: VariantOutcome


def variants_step(spec: SweepSpec, students: Mapping[str, Path], teacher: Path | None, out_dir: Path, log: Log = print,
                  *, store: WorkStore | None = None, interleave: Mapping[str, Any] | None = None) -> VariantStep | None:
    """`<out_dir>/variants.parquet` for the teacher and the planned `students`, or None when the
    spec wants no variants, there is nothing to compare, or the step as a whole could not run
    (said in the log: the stage then times eager fp32 alone). Variant failures are rows, not
    exceptions. `interleave`: see `variant_job`."""
    selection = spec.selection
    if not variants_wanted(selection):
        return None
    if teacher is None or not students:
        log("variants: no teacher or no student to measure; no runtime variants built")
        return None
    try:
        dev = DevRows.of(labelled_split(spec, DEV_SPLIT), task_spec(spec.task), spec.task.max_seq_length)
        job = variant_job(spec, students, teacher, out_dir, dev, store, interleave)
        log(f"variants: {len(job.models)} model(s) × {', '.join(job.runtimes)} at "
            f"{', '.join(s.label for s in selection.latency.shapes)}, scored on {len(dev.labels)} dev rows")
        outcome = on_one_node(run_variant_job, job, selection.latency, log)
        table = variant_table_of(outcome, selection)
    except Exception as e:  # noqa: BLE001 — the eager results, the report and the registry go on
        log(f"variants: not built ({failure(e)})")
        return None
    write_variants(variants_path(out_dir), table)
    return VariantStep(table, outcome)


def variant_table_of(outcome: VariantOutcome, selection: SelectionConfig) -> pd.DataFrame:
    """`run_variant_job`'s result as the variants table (`variant_rows`), front marked under the
    spec's objectives and budget."""
    latency = selection.latency
    return variant_rows(outcome.facts, outcome.measurements, front_shape=latency.front_shape, device=latency.device,
                        threads=outcome.threads, budget=selection)
