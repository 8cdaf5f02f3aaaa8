"""MLflow: one parent run per sweep, one nested run per trial, all owned by the driver process.

Runs created inside trials stay RUNNING forever when a scheduler stops the trial
(docs/stack-facts.md, "Only runs owned by the driver process"), so the sweep's driver owns every
run through a Tune callback: it opens a trial's run when the trial starts, logs each evaluation as
it arrives, and closes the run as FINISHED or FAILED.
One writer also means SQLite never sees concurrent writers. Runs are found by the tag
`drydock.trial_id` (our stable trial key) before being created, so a resumed sweep continues the
same runs instead of duplicating them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from pipeline.config import SweepSpec
from pipeline.errors import DrydockError
from pipeline.results import flatten

logging.getLogger("mlflow").setLevel(logging.WARNING)  # no schema-migration chatter

TRIAL_TAG = "drydock.trial_id"
SWEEP_TAG = "drydock.sweep"
PARENT_TAG = "mlflow.parentRunId"
MAX_BATCH = 900  # MLflow's log_batch limit is 1000 metrics


def tracking_uri(spec: SweepSpec, workdir: Path) -> str:
    if spec.tracking.uri:
        return spec.tracking.uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(workdir / 'mlflow.db').resolve()}"


def ensure_experiment(client: MlflowClient, name: str, workdir: Path) -> str:
    """Created with an explicit artifact location: the default is the creating process's cwd."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    uri = client.tracking_uri if hasattr(client, "tracking_uri") else mlflow.get_tracking_uri()
    location = (workdir / "mlartifacts").resolve().as_uri() if str(uri).startswith(("sqlite:", "file:", "/")) else None
    try:
        return client.create_experiment(name, artifact_location=location)
    except mlflow.exceptions.MlflowException:  # created meanwhile by another process
        return client.get_experiment_by_name(name).experiment_id


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """MLflow's form of `pipeline.results.flatten` (`{"a": {"b": 1}}` → `{"a.b": "1"}`), named
    because run parameters and the resume check compare in it."""
    return flatten(params, prefix, nested=True, as_text=True)


class SweepTracker:
    """The sweep's parent run and the get-or-create logic for trial runs."""

    def __init__(self, spec: SweepSpec, workdir: Path):
        self.uri = tracking_uri(spec, workdir)
        try:
            self.client = MlflowClient(self.uri)
            self.experiment_id = ensure_experiment(self.client, spec.experiment_name, workdir)
        except Exception as e:  # a typo in the URI, a server that does not answer, a bad credential
            source = "tracking.uri" if spec.tracking.uri else "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "tracking"
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DrydockError(f"{source}: cannot use the MLflow tracking store {self.uri!r}: {reason}") from None
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
