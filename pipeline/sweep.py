"""`drydock sweep`: prepare → teacher → search → select, on a local Ray instance or a cluster.

The stages, where they live, and what crosses between them:
    prepare   pipeline.prepare.stage      tokenized data, cached under the work directory
    teacher   pipeline.search.teacher     the fine-tuned teacher, cached (here or on Train workers)
    search    pipeline.search             one Tune trial per configuration × seed; each a Ray Train
                                          run (driver, trainer, worker); the recorder writes every
                                          trial's MLflow run and results-table row as it ends
    select    pipeline.select.stage       latency, Pareto front, report, registry

Metrics flow worker rank 0 → Train controller → `ReportRelay` (a node-local file) → the trial's
driver → Tune → the recorder. The folders of a sweep and its runs: `pipeline.search.state`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from ray.tune import Tuner

from pipeline import results as results_table
from pipeline.config import SweepSpec, check_for_sweep, load_deepspeed_preset
from pipeline.errors import DrydockError
from pipeline.measure.latency import check_latency_nodes
from pipeline.prepare.revisions import source_revisions
from pipeline.prepare.stage import prepare
from pipeline.search.driver import SearchContext
from pipeline.search.interrupt import SweepInterrupted, graceful_stop, interrupted_message
from pipeline.search.ray_instance import check_gpu_workers, init_ray, max_concurrent, resolve_bf16
from pipeline.search.recorder import SweepRecorder, record_pending, stand_in_callback
from pipeline.search.sealed import Sealed
from pipeline.search.searcher import study_searcher, write_search_summary
from pipeline.search.space import Trial, expand_trials
from pipeline.search.state import end_run, open_run, run_revisions, run_storage, saved_bf16, start_run
from pipeline.search.teacher import teacher_stage
from pipeline.search.trainer import TrainResources
from pipeline.search.tuner import close_progress, make_tuner, without_tune_logger_files
from pipeline.select.stage import select_stage
from pipeline.storage import WorkStore
from pipeline.tracking import TRACKING_DB, SweepTracker, uses_default_store
from pipeline.workdir import ARTIFACTS_DIR, CACHE_DIR, SEARCH_FILE

# Runs started before the recorder left this module pickled their Tune callback (tuner.pkl) as a
# call to `pipeline.sweep._stand_in_callback`: the name stays so that `--resume` unpickles them.
_stand_in_callback = stand_in_callback


def run_sweep(spec: SweepSpec, workdir: str | Path, *, resume: bool = False, address: str | None = None,
              log: Callable[[str], None] = print) -> pd.DataFrame:
    """Run the sweep; returns the results table. Every check that can fail on the user's input
    runs before the work it would waste, and nothing in the sweep's folder changes until the
    search starts. `workdir`: a folder, or a URI no node needs to mount (`pipeline.storage`)."""
    store = WorkStore.open(workdir)
    trials = [] if spec.search.searching else expand_trials(spec)  # a searching algorithm asks as it goes
    if not spec.methods or not (trials or spec.search.searching):
        raise DrydockError("methods: the spec lists no method to run")
    planned = (spec.search.num_configurations or 0) * len(spec.seeds) if spec.search.searching else len(trials)
    check_for_sweep(spec)  # what `drydock validate` checks against the teacher's own limits
    deepspeed_preset = load_deepspeed_preset(spec)  # read here: workers may run in another directory
    store.check_writable()  # a bad bucket, endpoint or credential fails here, before any work
    local = store.local
    run = open_run(spec, local / spec.name, resume, log, store)
    spec = run_revisions(spec, run)  # the hub commits, once for every stage (a resumed run keeps its own)
    own_tracking = store.is_remote and uses_default_store(spec)
    if own_tracking and store.exists(TRACKING_DB):  # the sweep's SQLite store, kept in the work location
        store.fetch(TRACKING_DB, fresh=True)
    tracker = SweepTracker(spec, local, artifact_root=store.uri(ARTIFACTS_DIR) if store.is_remote else None)  # a wrong URI fails here
    for root in tracker.moved_from:  # a copied work directory: its store pointed at the original's artifacts
        log(f"tracking: the MLflow store's artifact locations under {root} now point at {local / ARTIFACTS_DIR}")

    t0 = time.time()
    prepared = prepare(spec, local)
    folders = prepared.folders(local / CACHE_DIR)
    for name in folders.values():
        if not store.exists(f"cache/{name}"):  # content-keyed: one upload per location, not per sweep
            store.push(f"cache/{name}")
    log(f"prepare: {prepared.data.num_train} training examples, fingerprint {prepared.data.fingerprint} ({time.time() - t0:.1f}s)")

    init_ray(address or spec.resources.address, spec.resources.use_gpu)
    concurrency = max_concurrent(spec, log)  # before the teacher, which needs a trial's resources too
    gpus = check_gpu_workers(spec, log)
    check_latency_nodes(spec.selection.latency)  # a mixed-GPU cluster needs selection.latency.accelerator_type
    storage = run_storage(spec, run.paths, store)
    decided = resolve_bf16(spec, gpus, saved_bf16(run), log)  # once, for every trial (a teacher fine-tuned here: for its device)
    teacher, teacher_ref = teacher_stage(decided if spec.resources.teacher_on_workers() else spec, prepared, store,
                                         folders=folders, storage_path=storage.train, deepspeed_preset=deepspeed_preset, log=log)
    spec = decided
    metric_name = prepared.data.task.primary_metric

    start_run(run, spec, tracker, teacher_metrics=teacher.metrics, params={
        "task": spec.task.name, "teacher": spec.teacher.model, "methods": ",".join(spec.methods),
        "trials": str(planned), "search_algorithm": spec.search.algorithm, "bf16": spec.train.bf16, "data_fingerprint": prepared.data.fingerprint,
        **source_revisions(spec, prepared.data.revision)}, log=log, backfill=record_pending)  # the hub commits: teacher_revision, data_revision
    announce(spec, trials, run.paths.run_id, log)
    context = SearchContext(
        spec=Sealed(spec), resources=TrainResources.of(spec), workdir=store.location,
        trials_dir=run.paths.trials_dir.relative_to(local).as_posix(), train_storage=storage.train,
        metric_key=f"eval/{metric_name}", teacher={"path": teacher_ref, "metrics": teacher.metrics, "key": teacher.key},
        prepared=folders, deepspeed_preset=deepspeed_preset, in_actor=spec.resources.trial_runner == "tune-actor",
    )
    if own_tracking:
        store.push(TRACKING_DB)  # the parent run is in the record before any trial starts
    recorder = SweepRecorder(run.paths, tracker, metric_name, teacher.metrics.get(context.metric_key), log, store=store,
                             tracking_file=TRACKING_DB if own_tracking else None)
    status, tuner = "FAILED", None
    try:
        searcher = study_searcher(spec, context, store, run, store.localize(teacher_ref)) if spec.search.searching else None
        tuner = make_tuner(spec, trials, context, storage, concurrency=concurrency, callback=recorder, run=run, log=log,
                           searcher=searcher)
        fit(tuner, recorder, spec, run.paths.run_id, log)
        if searcher is not None:  # before the select stage, whose report shows it (pushed with the run's files)
            write_search_summary(searcher, run.paths.run_dir / SEARCH_FILE, log)
        recorder.close()  # the verifier is not needed while measuring latency
        # the teacher as every node reaches it (a given teacher folder is published under teachers/)
        select_stage(spec, local, run.paths.sweep_dir, tracker, store.localize(teacher_ref), log, store=store)
        status = "FINISHED"
    except SweepInterrupted:
        status = "INTERRUPTED"  # resumable; the parent run KILLED
        raise
    finally:
        recorder.close()
        end_run(run, tracker, status, log=log)
        if own_tracking and store.path(TRACKING_DB).is_file():
            store.push(TRACKING_DB)
    return results_table.read_results(run.paths.results)


def announce(spec: SweepSpec, trials: list[Trial], run_id: str, log: Callable[[str], None]) -> None:
    if spec.search.searching:
        log(f"search: {spec.search.algorithm} over {', '.join(spec.methods)}, {spec.search.num_configurations} configurations "
            f"× seeds {spec.seeds}, aiming at {' and '.join(spec.search.aims_at)}; run {run_id}")
    else:
        log(f"search: {len(trials)} trials ({', '.join(sorted({t.method for t in trials}))}) × seeds {spec.seeds}; run {run_id}")


def fit(tuner: Tuner, recorder: SweepRecorder, spec: SweepSpec, run_id: str, log: Callable[[str], None]) -> None:
    """Tune's search; on SIGINT or SIGTERM it stops as interrupted (`pipeline.search.interrupt`):
    Tune has saved its state with the running trials unfinished, and no selection follows."""
    try:
        with graceful_stop(log) as stopped, without_tune_logger_files():
            grid = tuner.fit()
        if stopped.signal:
            raise SweepInterrupted(interrupted_message(spec, run_id, stopped.signal, recorder.interrupted()))
        recorder.reconcile(grid)
    finally:
        close_progress(tuner)
