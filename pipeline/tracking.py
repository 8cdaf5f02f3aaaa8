"""MLflow: one parent run per sweep, one nested run per trial, all owned by the driver process.

Runs created inside trials stay RUNNING forever when a scheduler stops the trial
(docs/stack-facts.md, "Only runs owned by the driver process"), so the sweep's driver owns every
run through a Tune callback: it opens a trial's run when the trial starts, logs each evaluation as
it arrives, and closes the run as FINISHED or FAILED.
One writer also means SQLite never sees concurrent writers. Runs are found by the tag
`drydock.trial_id` (our stable trial key) before being created, so a resumed sweep continues the
same runs instead of duplicating them.
A tracking server that does not answer is named at the first call, within seconds
(`check_reachable`, `TrackingUnreachable`: exit 3); every later call keeps MLflow's own retries.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import sqlite3
import time
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from pipeline.config import SweepSpec
from pipeline.errors import DrydockError, first_line
from pipeline.errors import TrackingUnreachable as TrackingUnreachable
from pipeline.errors import redacted as redacted
from pipeline.results import flatten
from pipeline.workdir import ARTIFACTS_DIR
from pipeline.workdir import TRACKING_DB as TRACKING_DB

TRIAL_TAG = "drydock.trial_id"
SWEEP_TAG = "drydock.sweep"
PARENT_TAG = "mlflow.parentRunId"
MAX_BATCH = 900  # MLflow's log_batch limit is 1000 metrics
PROBE_TIMEOUT_S = 10  # the first call to a tracking server: no answer within this is "unreachable"
GATEWAY_DOWN = (502, 503, 504)  # a proxy answering for a tracking server that is not there


def check_reachable(uri: str, source: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """One call to an HTTP tracking server without MLflow's retries (by default 7, backing off to
    some 4 minutes in all, MLFLOW_HTTP_REQUEST_MAX_RETRIES/_BACKOFF_FACTOR/_TIMEOUT): no answer
    within `timeout` seconds, a refused connection, an unknown host, or a gateway's 502/503/504 is
    `TrackingUnreachable` at once; a failed TLS handshake is the user's to fix. Any other answer,
    an error included, is left to the calls that follow (they keep MLflow's retries, which ride out
    a server restarting mid-sweep) to use or to explain."""
    if not uri.startswith(("http://", "https://")):
        return
    import requests
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    try:
        response = http_request(get_default_host_creds(uri), "/api/2.0/mlflow/experiments/get-by-name", "GET",
                                max_retries=0, backoff_factor=0, backoff_jitter=0, retry_codes=frozenset(),
                                timeout=timeout, raise_on_status=False, params={"experiment_name": "Default"})
    except MlflowException as e:
        cause = e.__cause__ or e.__context__
        if isinstance(cause, requests.exceptions.SSLError):
            raise DrydockError(f"{source}: the TLS handshake with the MLflow tracking server {redacted(uri)} failed: {_short(cause)}") from None
        if isinstance(cause, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
            why = f"no answer within {timeout:g}s" if isinstance(cause, requests.exceptions.Timeout) else _short(cause)
            raise TrackingUnreachable(f"{source}: the MLflow tracking server {redacted(uri)} is unreachable: {why}; nothing was started "
                                      "(is the server up, and its address right?)") from None
        return
    if response.status_code in GATEWAY_DOWN:
        raise TrackingUnreachable(f"{source}: the MLflow tracking server {redacted(uri)} is unreachable: it answered {response.status_code} "
                                  f"{response.reason or ''}".rstrip() + "; nothing was started")


def _short(error: BaseException) -> str:
    """`Connection refused`, `Name or service not known`…: what a requests error comes down to."""
    found = re.findall(r"\[Errno -?\d+\] ([^'\"()\]]+)", str(error))
    return found[-1].strip() if found else (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def tracking_uri(spec: SweepSpec, workdir: Path) -> str:
    if spec.tracking.uri:
        return spec.tracking.uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(workdir / TRACKING_DB).resolve()}"


def uses_default_store(spec: SweepSpec) -> bool:
    """No tracking URI given: the sweep keeps its own SQLite store in the work directory."""
    return not spec.tracking.uri and not os.environ.get("MLFLOW_TRACKING_URI")


# Where the sweep's own SQLite store (`<workdir>/mlflow.db`) holds absolute artifact locations.
RELOCATED_COLUMNS = (("experiments", "artifact_location"), ("runs", "artifact_uri"), ("logged_models", "artifact_location"),
                     ("model_versions", "storage_location"), ("model_versions", "source"))


def relocate_artifacts(db: Path, workdir: Path) -> list[str]:
    """Point the work directory's own store at the work directory's own `mlartifacts`.

    MLflow keeps absolute `file://` locations in its store: an experiment's artifact location,
    each run's, each logged model's and model version's. A work directory copied elsewhere (a
    backup restored, a sweep moved to a bigger disk) would go on writing its artifacts into the
    original's folder, and read them from there. So every location under another folder's
    `mlartifacts` is rewritten to this one's, before MLflow opens the store; returns the roots
    moved from (empty when nothing was)."""
    if not db.is_file() or not (workdir / ARTIFACTS_DIR).is_dir():  # the store copied without its artifacts: leave it
        return []
    here = (workdir / ARTIFACTS_DIR).resolve().as_uri()
    try:
        with closing(sqlite3.connect(db)) as connection, connection:  # one transaction: all moved, or none
            return _relocate(connection, here)
    except sqlite3.Error as e:
        raise DrydockError(f"tracking: the work directory's MLflow store {db} cannot be read or updated ({e}); "
                           "is it an MLflow SQLite file, and writable?") from None


def _relocate(connection: sqlite3.Connection, here: str) -> list[str]:
    tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "experiments" not in tables:
        return []
    roots = sorted({loc.rstrip("/") for (loc,) in connection.execute("SELECT artifact_location FROM experiments")
                    if isinstance(loc, str) and loc.startswith("file://") and loc.rstrip("/").endswith(f"/{ARTIFACTS_DIR}")
                    and loc.rstrip("/") != here})
    for root in roots:
        for table, column in RELOCATED_COLUMNS:
            columns = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")} if table in tables else set()
            if column in columns:  # `root` itself, or a path under it
                connection.execute(f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                                   f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                                   (here, len(root) + 1, root, len(root) + 1, root + "/"))
    return roots


def ensure_experiment(client: MlflowClient, name: str, workdir: Path, artifact_root: str | None = None) -> str:
    """Created with an explicit artifact location: the default is the creating process's cwd.
    `artifact_root`: where a file-based store's artifacts go instead of `<workdir>/mlartifacts`
    (a URI work location's `mlartifacts`, so they outlive this node's mirror)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    uri = client.tracking_uri if hasattr(client, "tracking_uri") else mlflow.get_tracking_uri()
    location = None
    if str(uri).startswith(("sqlite:", "file:", "/")):
        location = artifact_root or (workdir / ARTIFACTS_DIR).resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except mlflow.exceptions.MlflowException:
        found = client.get_experiment_by_name(name)
        if found is None:  # not a race with another process (e.g. a user who may not create one): say why
            raise
        return found.experiment_id  # created meanwhile by another process


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """MLflow's form of `pipeline.results.flatten` (`{"a": {"b": 1}}` → `{"a.b": "1"}`), named
    because run parameters and the resume check compare in it."""
    return flatten(params, prefix, nested=True, as_text=True)


WRITER_TAG = "drydock.last_sweep"  # set on the experiment and the registered model by check_writable


def check_writable(client: MlflowClient, uri: str, spec: SweepSpec, experiment_id: str) -> None:
    """The sweep's MLflow login may change its experiment and, when it exists, its registered
    model, or the sweep stops here, before any work. A server with access control (MLflow's
    basic-auth app) lets any user read and create, but answers `403` to writes into an
    experiment or registered model that another user created, and the first such write is the
    parent run after the teacher stage, or the registration after every trial. Probed with the
    tag `drydock.last_sweep` (the sweep's name), which needs the same EDIT permission; a
    registered model that does not exist yet is left alone: creating it makes the login its
    manager (cluster/README.md, "Tracking server with authentication")."""
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    login = f"the MLflow user {user!r}" if user else "the MLflow login"

    def refused(what: str, field: str, error: MlflowException) -> DrydockError:
        reason = first_line(error)
        if error.error_code != "PERMISSION_DENIED":
            return DrydockError(f"{field}: cannot write to the {what} at {redacted(uri)}: {reason}")
        return DrydockError(f"{field}: {login} may not write to the {what} at {redacted(uri)} ({reason}); one that another "
                            f"user created needs EDIT for {user or 'this login'} (the MLflow admin grants it), or give "
                            f"{field} a name of its own")

    try:
        client.set_experiment_tag(experiment_id, WRITER_TAG, spec.name)
    except MlflowException as e:
        raise refused(f"experiment {spec.experiment_name!r}", "tracking.experiment", e) from None
    registry = MlflowClient(uri, registry_uri=uri)
    name = spec.registered_model_name
    try:
        registry.get_registered_model(name)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return
        raise refused(f"registered model {name!r}", "tracking.registered_model", e) from None
    try:
        registry.set_registered_model_tag(name, WRITER_TAG, spec.name)
    except MlflowException as e:
        raise refused(f"registered model {name!r}", "tracking.registered_model", e) from None


def check_store_writable(client: MlflowClient, uri: str, source: str, spec: SweepSpec, experiment_id: str) -> None:
    """A database or folder store opens and reads whatever its file's mode; the sweep writes its
    tag (`drydock.last_sweep`) here, so that one it cannot write stops before any work. One store
    holds the runs and the registry, so one write answers for both."""
    database_log = logging.getLogger("mlflow.store.db.utils")  # logs the refused write's traceback at ERROR
    level = database_log.level
    database_log.setLevel(logging.CRITICAL)
    try:
        client.set_experiment_tag(experiment_id, WRITER_TAG, spec.name)
    except Exception as e:  # noqa: BLE001 - SQLAlchemy's or the file system's error, said plainly
        raise DrydockError(f"{source}: cannot write to the MLflow tracking store {redacted(uri)}: {first_line(e)}") from None
    finally:
        database_log.setLevel(level)


class SweepTracker:
    """The sweep's parent run and the get-or-create logic for trial runs."""

    def __init__(self, spec: SweepSpec, workdir: Path, artifact_root: str | None = None):
        self.uri = tracking_uri(spec, workdir)
        source = "tracking.uri" if spec.tracking.uri else "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "tracking"
        check_reachable(self.uri, source)  # seconds, not MLflow's minutes of retries, for a server that is not there
        self.moved_from: list[str] = []  # the artifact roots a copied work directory's store pointed at
        if uses_default_store(spec) and artifact_root is None:  # its own store: a copied work directory writes here
            self.moved_from = relocate_artifacts(workdir / TRACKING_DB, workdir)
        try:
            self.client = MlflowClient(self.uri)
            self.experiment_id = ensure_experiment(self.client, spec.experiment_name, workdir, artifact_root)
        except Exception as e:  # a typo in the URI, a bad credential, a server that answers but is not MLflow
            raise DrydockError(f"{source}: cannot use the MLflow tracking store {redacted(self.uri)!r}: {first_line(e)}") from None
        if self.uri.startswith(("http://", "https://")):  # a server may refuse writes that reads pass
            check_writable(self.client, self.uri, spec, self.experiment_id)
        else:  # so may a store's file (a read-only mlflow.db): its first write was the parent run, after the teacher
            check_store_writable(self.client, self.uri, source, spec, self.experiment_id)
        self.spec = spec
        self.parent_id: str | None = None
        self._runs: dict[str, str] = {}

    def start_parent(self, resume: bool) -> str:
        """A resumed sweep continues its last parent run instead of starting a second one."""
        if resume:
            runs = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{SWEEP_TAG}` = '{self.spec.name}' and tags.`drydock.role` = 'sweep'",
                order_by=["attributes.start_time DESC"], max_results=1,
            )
            if runs:
                self.parent_id = runs[0].info.run_id
                self.client.update_run(self.parent_id, status="RUNNING")
                return self.parent_id
        run = self.client.create_run(
            self.experiment_id, run_name=f"sweep-{self.spec.name}",
            tags={SWEEP_TAG: self.spec.name, "drydock.role": "sweep"},
        )
        self.parent_id = run.info.run_id
        return self.parent_id

    def log_parent(self, params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None) -> None:
        assert self.parent_id
        self.client.log_batch(
            self.parent_id,
            metrics=[Metric(k, float(v), _now(), 0) for k, v in (metrics or {}).items()],
            params=[Param(k, v[:6000]) for k, v in flatten_params(params or {}).items()],
        )

    def log_parent_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        assert self.parent_id
        self.client.log_artifact(self.parent_id, str(path), artifact_path)

    def end_parent(self, status: str = "FINISHED") -> None:
        if self.parent_id:
            self.client.set_terminated(self.parent_id, status)

    def under(self, parent_id: str) -> SweepTracker:
        """This tracker writing trial runs under another parent run (an earlier run's)."""
        other = copy.copy(self)
        other.parent_id, other._runs = parent_id, {}
        return other

    def close_abandoned(self, parent_id: str) -> tuple[bool, int]:
        """Set KILLED what a driver killed mid-run left RUNNING: the trial runs under `parent_id`,
        and that parent run; returns (whether the parent was RUNNING, how many trial runs were)."""
        parent = self.client.get_run(parent_id)
        query = f"tags.`{PARENT_TAG}` = '{parent_id}' and attributes.status = 'RUNNING'"
        killed = 0
        while True:  # a killed run no longer matches: ask again until none is left
            runs = self.client.search_runs([parent.info.experiment_id], filter_string=query, max_results=500)
            for run in runs:
                self.client.set_terminated(run.info.run_id, "KILLED")
            killed += len(runs)
            if len(runs) < 500:
                break
        was_running = parent.info.status == "RUNNING"
        if was_running:
            self.client.set_terminated(parent_id, "KILLED")
        return was_running, killed

    def trial_run(self, trial_id: str, params: dict[str, Any] | None = None, tags: dict[str, str] | None = None) -> str:
        """Get or create the nested run of a trial (by tag, so restores do not duplicate)."""
        if trial_id in self._runs:
            return self._runs[trial_id]
        found = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{TRIAL_TAG}` = '{trial_id}' and tags.`{PARENT_TAG}` = '{self.parent_id}'",
            max_results=1,
        )
        if found:
            run_id = found[0].info.run_id
            if found[0].info.status != "FINISHED":
                self.client.update_run(run_id, status="RUNNING")
        else:
            run = self.client.create_run(
                self.experiment_id, run_name=trial_id,
                tags={TRIAL_TAG: trial_id, PARENT_TAG: self.parent_id, SWEEP_TAG: self.spec.name, **(tags or {})},
            )
            run_id = run.info.run_id
            if params:
                flat = flatten_params(params)
                items = [Param(k, v[:6000]) for k, v in flat.items()]
                for i in range(0, len(items), 100):
                    self.client.log_batch(run_id, params=items[i : i + 100])
        self._runs[trial_id] = run_id
        return run_id

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        ts = _now()
        items = [Metric(k, float(v), ts, step) for k, v in metrics.items() if _is_number(v)]
        for i in range(0, len(items), MAX_BATCH):
            self.client.log_batch(run_id, metrics=items[i : i + MAX_BATCH])

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def log_artifacts(self, run_id: str, folder: Path, artifact_path: str) -> None:
        self.client.log_artifacts(run_id, str(folder), artifact_path)

    def finish(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status)


def _now() -> int:
    return int(time.time() * 1000)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")
