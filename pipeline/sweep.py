"""`drydock sweep`: prepare → teacher → search, on a local Ray instance or a cluster.

Shape (Ray 2.60, Train V2; STACK-NOTES §a): one `Tuner` for the whole sweep grids over the
concrete trial list from `pipeline.search.space`; its trainable is a thin trial driver (a function
reserving no CPU — `{"cpu": 0, "memory": 1}`, since `{"cpu": 0}` is rejected and 0.01 CPU can
deadlock two workers on two CPUs) that builds one `TorchTrainer` per trial and blocks on `fit()`.
Metrics flow worker rank 0 → Train controller → `ReportRelay` (a node-local file, `pipeline.search.relay`)
→ the trial driver → Tune → our callback (MLflow + results table).

Folders, under `<workdir>/<sweep name>/`:
    state.json                 the current run id and its MLflow parent run (what --resume continues)
    results.parquet            one row per trial of the current run (ARCHITECTURE §5)
    runs/<run id>/tune/        Tune's experiment state (Tuner.restore reads it)
    runs/<run id>/train/       Ray Train checkpoints, one folder per trial (resume point for retries)
    runs/<run id>/trials/<key> each trial's student/, metrics.json and outcome.json
A new sweep run never deletes an earlier run's folders; results.parquet describes the newest.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import results as results_table
from pipeline.config import SweepSpec, spec_to_dict
from pipeline.errors import DrydockError
from pipeline.search.driver import trial_driver
from pipeline.search.outcome import read_outcome
from pipeline.search.space import TrialSpec, expand_trials

STATE_FILE = "state.json"
logger = logging.getLogger(__name__)

# Environment for every Ray process of the sweep. Health checks every 0.5 s instead of 2 s cut
# ~2-3 s per trial (reports reach Tune sooner, trial ends are noticed sooner); the preemption
# watcher and state tracking are actors we do not use.
RAY_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_ENABLE_STATE_TRACKING": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "PYTHONWARNINGS": "ignore::DeprecationWarning,ignore::FutureWarning,ignore::UserWarning",
    "RAY_AIR_NEW_OUTPUT": "0",
}

# Where the State API of a local instance is, for every process of it. Ray Train's placement-group
# cleaner (a detached actor per trial) asks the State API whether the trial's controller is alive
# and removes the trial's placement group when it is not. Without an address it asks the cluster
# named in /tmp/ray/ray_current_cluster, which is whichever instance last wrote it (`ray start`, a
# test's `ray.cluster_utils.Cluster`): with a second Ray instance on the machine, the cleaner found
# no such controller there and removed a live trial's placement group (measured: a CoFi trial's
# worker killed mid-training while the test suite ran; Train retried it from its checkpoint). On a
# cluster the head's `ray start` writes that file for its own GCS, so only the local case is fixed.
API_SERVER_VARIABLE = "RAY_API_SERVER_ADDRESS"
_api_server_set: str | None = None  # the value init_ray last put into os.environ


@dataclass
class SweepPaths:
    sweep_dir: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        return self.sweep_dir / "runs" / self.run_id

    @property
    def trials_dir(self) -> Path:
        return self.run_dir / "trials"

    @property
    def results(self) -> Path:
        return self.sweep_dir / results_table.RESULTS_FILE


# ----------------------------------------------------------------------------------------------
# Ray
# ----------------------------------------------------------------------------------------------


def init_ray(address: str | None, use_gpu: bool) -> None:
    import ray

    if ray.is_initialized():
        return
    env = dict(RAY_ENV)
    if not use_gpu:
        env["DS_ACCELERATOR"] = "cpu"  # never on GPU nodes: DeepSpeed must find CUDA there
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "TORCH_EXTENSIONS_DIR", "MLFLOW_TRACKING_URI",
                "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"):
        if key in os.environ:
            env[key] = os.environ[key]
    address = address or os.environ.get("RAY_ADDRESS")
    global _api_server_set
    if _api_server_set and os.environ.get(API_SERVER_VARIABLE) == _api_server_set:
        del os.environ[API_SERVER_VARIABLE]  # a previous local instance's, started by this process
    dashboard: dict[str, Any] = {}
    if not address:
        host, port = "127.0.0.1", free_port()
        dashboard = {"dashboard_host": host, "dashboard_port": port}
        env[API_SERVER_VARIABLE] = _api_server_set = f"http://{host}:{port}"
    os.environ.update({k: v for k, v in env.items() if k.startswith("RAY_")})
    logging.getLogger("ray").setLevel(logging.ERROR)
    verbose = os.environ.get("DRYDOCK_RAY_LOGS") == "1"
    common = dict(runtime_env={"env_vars": env}, log_to_driver=verbose, logging_level="ERROR" if not verbose else "INFO")
    if address:
        ray.init(address=address, **common)
    else:
        # Local: sized to this machine. The dashboard stays on (include_dashboard=None): without
        # its State API, Train's placement-group cleaner cannot free the workers of trials that
        # ASHA stops, and later trials time out waiting for them (STACK-NOTES F1). Its address is
        # fixed up front and given to every process (see API_SERVER_VARIABLE).
        temp_dir = os.environ.get("DRYDOCK_RAY_TMPDIR")  # a short path: Ray's sockets live under it
        # Ray counts the CPUs itself: unlike os.cpu_count(), its count honours a container's quota.
        ray.init(address="local", object_store_memory=256 * 2**20, include_dashboard=None,
                 **dashboard, **({"_temp_dir": temp_dir} if temp_dir else {}), **common)


def free_port() -> int:
    """A TCP port free on this machine now (the OS picks it; Ray binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def max_concurrent(spec: SweepSpec, log: Callable[[str], None] = print) -> int:
    """How many trials run at once: as many as the cluster holds now, or the spec's number.

    Checked before the teacher stage, which needs one trial's resources too: a request the
    cluster cannot meet would otherwise wait (and retry) instead of saying so."""
    import ray

    r = spec.resources
    resources = ray.cluster_resources()
    kind = "GPU" if r.use_gpu else "CPU"
    if r.use_gpu:
        capacity, per_trial = resources.get("GPU", 0.0), r.workers_per_trial * r.gpus_per_worker
    else:
        capacity, per_trial = resources.get("CPU", 0.0), r.workers_per_trial * r.cpus_per_worker
    fits = int(capacity // per_trial) if per_trial else 1
    wanted = spec.search.max_concurrent_trials
    if wanted:
        # An autoscaling cluster may start smaller than it grows: trust the spec's number, but say
        # what happens to the trials the cluster cannot hold yet.
        if wanted > fits:
            log(f"search: max_concurrent_trials is {wanted}, but the Ray cluster holds {fits} trial(s) now "
                f"({capacity:g} {kind}s, {per_trial:g} per trial); the others wait for it to grow, and a trial "
                f"that gets no workers within about 4 minutes fails (RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S, "
                f"60 s, tried 4 times)")
        return wanted
    if fits < 1:
        raise DrydockError(
            f"resources: a trial needs {per_trial:g} {kind}s ({r.workers_per_trial} workers), "
            f"but the Ray cluster has {capacity:g}"
        )
    return fits


# ----------------------------------------------------------------------------------------------
# the driver's callback: MLflow runs and the results table
# ----------------------------------------------------------------------------------------------


def _stand_in_callback():
    from ray import tune

    return tune.Callback()


def make_callback(spec: SweepSpec, paths: SweepPaths, tracker, metric_name: str, teacher_metric: float | None, log: Callable[[str], None]):
    from ray import tune

    class SweepCallback(tune.Callback):
        """Owns every trial's MLflow run and row; runs in the sweep's driver process.

        Tune calls these hooks on its event loop, which meanwhile starts no trial and handles no
        report. Recording a finished trial (verifying its export in another process, copying the
        student into the artifact store, a dozen tracking calls) takes seconds, more against a
        remote tracking server, so every tracking and table write goes to one recorder thread:
        one thread keeps each trial's writes in order and the results table single-writer.
        `close()` drains it; `reconcile()` records, from Tune's own results, any trial whose
        recording a killed driver never got to.
        """

        def __init__(self) -> None:
            self.last: dict[str, dict[str, Any]] = {}
            self.ended: set[str] = set()  # trials whose driver reported its final result
            self.verifier = None
            self.recorder: ThreadPoolExecutor | None = None

        def setup(self, **info):
            # Started with the search, not at the first finished trial: its imports (seconds)
            # then overlap the first trials' start-up instead of holding Tune's loop.
            from pipeline.training.export import Verifier

            if self.verifier is None:
                self.verifier = Verifier()

        def __reduce__(self):
            # Tune pickles its callbacks into tuner.pkl; ours holds live clients and processes
            # and is attached again on restore, so only a stand-in is stored.
            return (_stand_in_callback, ())

        def _trial(self, trial) -> TrialSpec:
            return TrialSpec.from_dict(trial.config["trial"])

        def _record(self, what: str, fn: Callable[..., None], *args) -> None:
            if self.recorder is None:
                self.recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drydock-recorder")

            def job() -> None:
                try:
                    fn(*args)
                except Exception as e:  # a tracking hiccup must not end the sweep; say what was lost
                    logger.exception("recording %s failed", what)
                    log(f"warning: recording {what} failed: {type(e).__name__}: {e}")

            self.recorder.submit(job)

        def on_trial_start(self, iteration, trials, trial, **info):
            t = self._trial(trial)
            self._record(f"the start of trial {t.key}", tracker.trial_run, t.key,
                         {"method": t.method, "seed": t.seed, "config_id": t.config_id, "params": t.params},
                         {"drydock.method": t.method, "ray_trial_id": trial.trial_id})

        def on_trial_result(self, iteration, trials, trial, result, **info):
            t = self._trial(trial)
            if result.get("drydock_final"):
                self.ended.add(t.key)
                return
            self.last[t.key] = result
            metrics = {k: v for k, v in result.items() if k.split("/")[0] in ("eval", "schedule", "loss") or k.startswith("eval_") or k in ("epoch", "progress")}
            step = int(result.get("step", 0))  # read now: Tune owns `result`
            self._record(f"metrics of trial {t.key}", lambda: tracker.log_metrics(tracker.trial_run(t.key), metrics, step))

        def on_trial_complete(self, iteration, trials, trial, **info):
            t = self._trial(trial)
            stopped = t.key not in self.ended  # complete without its final report: the scheduler stopped it
            self._record(f"trial {t.key}", self._finish, t, None, dict(self.last.get(t.key, {})), stopped)

        def on_trial_error(self, iteration, trials, trial, **info):
            t = self._trial(trial)
            error = str(getattr(trial, "error_message", None) or "trial errored")
            self._record(f"trial {t.key}", self._finish, t, error, dict(self.last.get(t.key, {})))

        def _verify(self, trial_dir: Path, outcome: dict[str, Any]) -> tuple[str, dict[str, Any]]:
            """The export counts only if a fresh process without drydock reproduces its logits."""
            from pipeline.training.export import VERIFY_FILE, ExportMismatch, Verifier, load_reference, verify_export

            reference = trial_dir / VERIFY_FILE
            if not reference.is_file():
                return "finished", outcome
            if self.verifier is None:
                self.verifier = Verifier()
            batch, expected = load_reference(reference)
            try:
                outcome["export_max_abs_diff"] = verify_export(Path(outcome["student_path"]), expected, batch, self.verifier)
            except ExportMismatch as e:
                return "failed", {**outcome, "error": str(e)}
            return "finished", outcome

        def drain(self) -> None:
            """Wait for every queued recording (the results table is complete afterwards)."""
            if self.recorder is not None:
                self.recorder.shutdown(wait=True)
                self.recorder = None

        def close(self) -> None:
            self.drain()
            if self.verifier is not None:
                self.verifier.close()
                self.verifier = None

        def reconcile(self, result_grid) -> None:
            """Record the trials Tune has done with but this driver never recorded.

            A driver killed between a trial's end and its recording leaves Tune's state saying
            "terminated" and no row: a resumed Tune does not run that trial again, so its row
            and MLflow run are written here from what Tune kept (outcome file, last report).
            """
            self.drain()
            frame = results_table.read_results(paths.results)
            done = set(frame.loc[frame["status"].isin(["finished", "failed", "stopped"]), "trial_id"]) if len(frame) else set()
            for result in result_grid:
                config = (result.config or {}).get("trial")
                if not config:
                    continue
                t = TrialSpec.from_dict(config)
                if t.key in done:  # drained above: every row this driver wrote is in the table
                    continue
                error = str(result.error) if result.error is not None else None
                stopped = error is None and not (result.metrics or {}).get("drydock_final")
                last = {k: v for k, v in (result.metrics or {}).items() if not k.startswith("drydock_")}
                self._record(f"trial {t.key}", self._finish, t, error, last, stopped)
            self.drain()

        def _finish(self, t: TrialSpec, error: str | None, last: dict[str, Any], stopped: bool = False) -> None:
            run_id = tracker.trial_run(t.key, {"method": t.method, "seed": t.seed, "config_id": t.config_id, "params": t.params},
                                       {"drydock.method": t.method})
            outcome = read_outcome(paths.trials_dir / t.key)
            if stopped and outcome is not None and outcome.get("status") != "finished":
                # Tune killed the trial's actor; its Train worker, cut off from the controller that
                # died with it, may have written "failed: ActorDiedError" first. Not the trial's doing.
                outcome = None
            if outcome is None:
                # stopped by the scheduler (ASHA) before it finished, or lost
                status = "stopped" if error is None else "failed"
                outcome = {"status": status, "error": error, "metric": last.get(f"eval/{metric_name}"),
                           "metrics": {k.split("/", 1)[1]: v for k, v in last.items() if k.startswith("eval/")},
                           "steps": last.get("step")}
            status = outcome.get("status", "failed")
            if status == "finished":
                status, outcome = self._verify(paths.trials_dir / t.key, outcome)
            if outcome.get("teacher_metric") is None:
                outcome["teacher_metric"] = teacher_metric
            row = results_table.trial_row(
                t.key, t.method, t.seed, t.params, status, outcome, error=outcome.get("error"),
                mlflow_run_id=run_id, metric_name=metric_name,
            )
            results_table.upsert(paths.results, [row])
            final = {f"final/{k}": v for k, v in (outcome.get("metrics") or {}).items()}
            for key in ("num_params", "num_params_encoder", "train_seconds", "steps", "export_max_abs_diff"):
                if outcome.get(key) is not None:
                    final[key] = outcome[key]
            tracker.log_metrics(run_id, final, int(outcome.get("steps") or 0))
            tags = {"drydock.status": status, "drydock.error": outcome.get("error"), "drydock.node_id": outcome.get("node_id")}
            tracker.set_tags(run_id, {k: v for k, v in tags.items() if v})
            student = outcome.get("student_path")
            if status == "finished" and student and Path(student).is_dir():
                tracker.log_artifacts(run_id, Path(student), "student")
            tracker.finish(run_id, "FINISHED" if status in ("finished", "stopped") else "FAILED")
            metric = outcome.get("metric")
            shown = f"{metric_name} {metric:.4f}" if isinstance(metric, (int, float)) else (outcome.get("error") or "")[:120]
            log(f"trial {t.key}: {status} {shown}")

    return SweepCallback()


# ----------------------------------------------------------------------------------------------
# the sweep
# ----------------------------------------------------------------------------------------------


def _state(paths_dir: Path) -> dict[str, Any]:
    f = paths_dir / STATE_FILE
    return json.loads(f.read_text()) if f.is_file() else {}


def _save_state(sweep_dir: Path, state: dict[str, Any]) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    tmp = sweep_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, sweep_dir / STATE_FILE)


def check_resumable(spec: SweepSpec, saved: Path, run_id: str) -> None:
    """A resumed run keeps its trials' configurations, and its unfinished trials would train with
    the spec given now: a run whose spec changed (other than `resources`, where it runs) would mix
    two studies in one table, so it is refused."""
    from pipeline.tracking import flatten_params

    if not saved.is_file():  # killed before its spec was saved: nothing has trained yet
        return
    before = flatten_params(json.loads(saved.read_text()))
    now = flatten_params(spec_to_dict(spec))
    changed = sorted(k for k in before.keys() | now.keys()
                     if before.get(k) != now.get(k) and not k.startswith("resources."))
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        raise DrydockError(f"--resume: the spec differs from the one run {run_id} started with ({shown}); "
                           "resume it with that spec, or run without --resume to start a new run")


def run_sweep(
    spec: SweepSpec,
    workdir: Path,
    *,
    resume: bool = False,
    address: str | None = None,
    log: Callable[[str], None] = print,
):
    """Run the sweep; returns the results table (a pandas DataFrame)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from pipeline.prepare.stage import prepare
    from pipeline.search.teacher import finetune_teacher_on_workers
    from pipeline.tracking import SweepTracker
    from pipeline.training.teacher import ensure_teacher, existing_teacher

    workdir = workdir.resolve()
    sweep_dir = workdir / spec.name
    trials = expand_trials(spec)
    if not trials:
        raise DrydockError("methods: the spec lists no method to run")

    # Read here, before any work: workers may run elsewhere, in another working directory.
    deepspeed_preset = load_deepspeed_preset(spec)
    state = _state(sweep_dir)
    resuming = resume and bool(state.get("run_id"))
    if resume and not resuming:
        log(f"resume: no earlier run of {spec.name!r} in {sweep_dir}; starting a new one")
    run_id = state["run_id"] if resuming else time.strftime("%Y%m%d-%H%M%S")
    paths = SweepPaths(sweep_dir, run_id)
    if resuming:
        check_resumable(spec, paths.run_dir / "spec.json", run_id)
    tracker = SweepTracker(spec, workdir)  # a wrong tracking URI fails here, before any work

    # prepare: once, in this process, cached for every trial
    t0 = time.time()
    prepared = prepare(spec, workdir)
    log(f"prepare: {prepared.data.num_train} training examples, fingerprint {prepared.data.fingerprint} ({time.time() - t0:.1f}s)")

    init_ray(address or spec.resources.address, spec.resources.use_gpu)
    concurrency = max_concurrent(spec, log)
    # Checkpoints and Tune state: the run folder, or the spec's shared path/URI on a cluster
    # (every node must reach it; a node-local path breaks retries on another node).
    if spec.resources.storage_path:
        storage_root, tune_name = spec.resources.storage_path.rstrip("/"), f"{spec.name}-{run_id}-tune"
        train_storage = f"{storage_root}/{spec.name}-{run_id}-train"
    else:
        storage_root, tune_name, train_storage = str(paths.run_dir), "tune", str(paths.run_dir / "train")
    experiment_path = f"{storage_root}/{tune_name}"

    # teacher: once, cached for every trial and later sweep. Needed even when no method distils
    # from it: retention and speedup are measured against it.
    if spec.resources.teacher_on_workers() and existing_teacher(spec, prepared, workdir) is None:
        teacher = finetune_teacher_on_workers(spec, prepared, workdir, storage_path=train_storage,
                                              deepspeed_preset=deepspeed_preset, log=log)
    else:
        teacher = ensure_teacher(spec, prepared, workdir, log=log)
    metric_name = prepared.data.task.primary_metric
    metric_key = f"eval/{metric_name}"
    teacher_metric = teacher.metrics.get(metric_key)

    # Only now, every check passed and the teacher ready, does this run take the sweep's folder
    # over: the previous run's table moves into that run's folder.
    paths.trials_dir.mkdir(parents=True, exist_ok=True)
    if not resuming and paths.results.exists():
        previous = state.get("run_id")
        if previous:
            os.replace(paths.results, sweep_dir / "runs" / previous / results_table.RESULTS_FILE)
    if resuming and state.get("parent_run_id"):
        tracker.parent_id = state["parent_run_id"]
        tracker.client.update_run(tracker.parent_id, status="RUNNING")
    else:
        tracker.start_parent(resume=False)
        spec_file = paths.run_dir / "spec.json"
        spec_file.write_text(json.dumps(spec_to_dict(spec), indent=2))
        tracker.log_parent_artifact(spec_file)
        tracker.log_parent(
            params={"task": spec.task.name, "teacher": spec.teacher.model, "methods": ",".join(spec.methods),
                    "trials": str(len(trials)), "data_fingerprint": prepared.data.fingerprint},
            metrics={f"teacher/{k.split('/', 1)[-1]}": v for k, v in (teacher.metrics if teacher else {}).items()
                     if isinstance(v, (int, float))},
        )
    _save_state(sweep_dir, {"run_id": run_id, "parent_run_id": tracker.parent_id, "status": "running"})
    log(f"search: {len(trials)} trials ({', '.join(sorted({t.method for t in trials}))}) × seeds {spec.seeds}; run {run_id}")

    shared = {
        "spec": spec_to_dict(spec),
        "workdir": str(workdir),
        "trials_dir": str(paths.trials_dir),
        "train_storage": train_storage,
        "teacher": {"path": str(teacher.path), "metrics": teacher.metrics, "key": teacher.key} if teacher else None,
        "metric_key": metric_key,
        "max_failures": spec.search.max_failures,
        "deepspeed_preset": deepspeed_preset,
    }
    if spec.search.scheduler == "asha":
        # Time axis: the fraction of its labeled training a trial has done (the loop's `progress`),
        # so trials of every method meet at the same rungs, however their phases are cut (MiniLM's
        # unlabeled distillation, a max_steps cap). grace_period is given in epochs of train.epochs.
        epochs = spec.train.epochs
        scheduler = ASHAScheduler(
            time_attr="progress", metric=metric_key, mode="max", max_t=1.0,
            grace_period=min(spec.search.asha.grace_period, epochs) / epochs,
            reduction_factor=spec.search.asha.reduction_factor,
        )
    else:
        scheduler = FIFOScheduler()
    trainable = tune.with_resources(tune.with_parameters(trial_driver, shared=shared), {"cpu": 0, "memory": 1})
    callback = make_callback(spec, paths, tracker, metric_name, teacher_metric, log)

    status = "FAILED"
    try:
        if resuming and tune.Tuner.can_restore(experiment_path):
            log(f"resume: continuing run {run_id} (finished trials are kept)")
            tuner = tune.Tuner.restore(experiment_path, trainable=trainable, resume_errored=True,
                                       param_space={"trial": tune.grid_search([t.to_dict() for t in trials])})
            # callbacks are not restored: attach ours again
            tuner._local_tuner._run_config.callbacks = [callback]
        else:
            # Tune reuses a finished trial's actor (its process, its imports) for the next trial,
            # but not safely a trial ASHA stops: its driver is still inside fit(), Tune 2.60 caches
            # the actor anyway, its reset fails, and Tune fails the *next* trial with "Could not
            # re-use actor" and then waits on it forever (measured: a 6-trial ASHA sweep hung). So
            # with ASHA (any scheduler that stops trials) every trial gets a fresh actor; killing
            # the stopped one ends its Train run. Only FIFO never stops a trial mid-run.
            reuse_actors = spec.search.scheduler == "fifo"
            tuner = tune.Tuner(
                trainable,
                param_space={"trial": tune.grid_search([t.to_dict() for t in trials])},
                tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=concurrency,
                                            reuse_actors=reuse_actors),
                run_config=tune.RunConfig(
                    name=tune_name, storage_path=storage_root, callbacks=[callback],
                    # Train retries lost workers inside a trial; Tune retries a trial whose driver
                    # died (its node was lost), and the new driver's TorchTrainer, same name and
                    # storage, resumes from the trial's last checkpoint. A trial whose training
                    # raises is not a Tune failure: its driver records it and reports normally.
                    failure_config=tune.FailureConfig(max_failures=spec.search.max_failures), verbose=0,
                ),
            )
        callback.reconcile(tuner.fit())
        callback.close()  # the verifier is not needed while measuring latency
        from pipeline.select.stage import select_stage

        select_stage(spec, workdir, sweep_dir, tracker, teacher.path, log)
        status = "FINISHED"
    finally:
        callback.close()
        frame = results_table.read_results(paths.results)
        for path in (paths.results,):
            if path.exists():
                tracker.log_parent_artifact(path)
        tracker.end_parent(status if status == "FINISHED" else "KILLED")
        _save_state(sweep_dir, {"run_id": run_id, "parent_run_id": tracker.parent_id, "status": status.lower()})
    return frame


def load_deepspeed_preset(spec: SweepSpec) -> dict[str, Any] | None:
    ds = spec.resources.deepspeed
    if spec.resources.strategy != "deepspeed" or not ds.preset:
        return None
    path = Path(ds.preset)
    if not path.is_file():
        raise DrydockError(f"resources.deepspeed.preset: {path} is not a file (a DeepSpeed JSON config)")
    try:
        preset = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DrydockError(f"resources.deepspeed.preset: {path} is not valid JSON ({e})") from None
    stage = preset.get("zero_optimization", {}).get("stage")
    if stage is not None and stage != ds.zero_stage:
        raise DrydockError(f"resources.deepspeed.preset: {path} sets ZeRO stage {stage}, but resources.deepspeed.zero_stage is {ds.zero_stage}")
    return preset


def summary_table(frame) -> str:
    """The trial table printed at the end of a sweep (rich, plain text when piped)."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    table = Table(title="trials", show_lines=False)
    for col in ["trial_id", "status", "metric", "retention", "num_params_encoder", "train_seconds"]:
        table.add_column(col, justify="right" if col not in ("trial_id", "status") else "left")
    for _, row in frame.iterrows():
        def fmt(v, digits=4):
            if v is None or (isinstance(v, float) and math.isnan(v)) or v is getattr(__import__("pandas"), "NA", None):
                return "-"
            return f"{v:.{digits}f}" if isinstance(v, float) else str(v)
        table.add_row(str(row["trial_id"]), str(row["status"]), fmt(row["metric"]), fmt(row["retention"], 3),
                      fmt(row["num_params_encoder"]), fmt(row["train_seconds"], 1))
    out = StringIO()
    Console(file=out, width=140).print(table)
    return out.getvalue()
