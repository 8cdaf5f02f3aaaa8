"""The smoke sweep against a real `mlflow server` configured as the cluster runs it: the basic-auth
app with the settings of cluster/k8s/mlflow.yaml (its ConfigMap's basic_auth.ini and the
Deployment's flags, the stores swapped for SQLite and a folder), artifacts proxied by the server,
drydock logged in as a non-admin user, then a consumer with its own read-only login loading
`models:/<name>@champion` (in this process: a fresh process costs ~10 s of imports, and
tests/integration/select/test_registry.py already loads a registered student without drydock).

Everything listens on 127.0.0.1 and lives in tmp_path; the fixture stops the server. Ray is
started before the sweep's login is set, so no Ray process has it (only the driver talks to
MLflow, cluster/README.md). The sweep is the smoke spec cut to one trial: 40-60 s on 2 busy cores.
"""

from __future__ import annotations

import configparser
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import requests
import yaml
from mlflow import MlflowClient

from pipeline.config import load_spec
from pipeline.errors import DrydockError
from pipeline.select.champion import CHAMPION
from pipeline.select.registry import tracking

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
MANIFEST = ROOT / "cluster" / "k8s" / "mlflow.yaml"
pytestmark = pytest.mark.ray

ADMIN = ("admin", "admin-password-0123456789")
DRYDOCK = ("drydock", "drydock-password-0123456789")  # what the sweep logs in as (no admin rights)
READER = ("reader", "reader-password-0123456789")  # a consumer: the server's default permission only
CREDENTIAL_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_TRACKING_USERNAME",
                        "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
MODEL = "smoke-server-student"
WRITER_TAG = "drydock.last_sweep"  # pipeline.tracking.WRITER_TAG: the sweep's write check
# The Deployment's flags that name its own stores and sockets; the test gives its local ones.
LOCAL_FLAGS = ("--host", "--port", "--workers", "--backend-store-uri", "--artifacts-destination")


def shipped_server() -> tuple[str, list[str], dict[str, str]]:
    """(basic_auth.ini, `mlflow server` flags, its MLFLOW_SERVER_* settings) as
    cluster/k8s/mlflow.yaml ships them."""
    objects = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    (config,) = [d for d in objects if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "mlflow-auth"]
    (deployment,) = [d for d in objects if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["mlflow"] and container["args"][0] == "server"
    flags = [a for a in container["args"][1:] if a.split("=")[0] not in LOCAL_FLAGS]
    settings = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("MLFLOW_SERVER_") and "value" in e}
    return config["data"]["basic_auth.ini"], flags, settings


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A `mlflow server` process of this test; `ready()` waits for it and creates the users."""

    def __init__(self, folder: Path):
        ini, flags, settings = shipped_server()
        auth = configparser.ConfigParser()
        auth.read_string(ini)
        assert "admin_password" not in auth["mlflow"], "the admin password comes from a secret"
        auth["mlflow"]["database_uri"] = f"sqlite:///{folder / 'auth.db'}"  # PostgreSQL in the cluster
        self.default_permission = auth["mlflow"]["default_permission"]
        text = io.StringIO()
        auth.write(text)
        (folder / "basic_auth.ini").write_text(text.getvalue())
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.artifacts = folder / "artifacts"
        self.log = folder / "server.log"
        env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARIABLES}
        env.update({  # as the Deployment sets them from its secret
            "MLFLOW_AUTH_CONFIG_PATH": str(folder / "basic_auth.ini"),
            "MLFLOW_AUTH_ADMIN_USERNAME": ADMIN[0], "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN[1],
            "MLFLOW_FLASK_SERVER_SECRET_KEY": "a-test-secret-key",
            **settings,  # job execution off, as shipped: no huey job runner beside the server
        })
        argv = [sys.executable, "-m", "mlflow", "server", *flags, "--host", "127.0.0.1", "--port", str(self.port),
                "--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
                "--artifacts-destination", str(self.artifacts)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(argv, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self._ready = False

    def ready(self, timeout: float = 90) -> Server:
        if self._ready:
            return self
        deadline = time.time() + timeout
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"mlflow server exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if requests.get(f"{self.uri}/health", timeout=2).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):  # not up yet, or slow to answer on a loaded machine
                pass
            if time.time() > deadline:
                pytest.fail(f"mlflow server did not answer within {timeout} s:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.25)
        # the shipped MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false holds: no huey job runner in the server's session
        sessions = subprocess.run(["ps", "-eo", "sid=,args="], capture_output=True, text=True).stdout.splitlines()
        # (the job runner, which starts the huey consumers, is up by the time /health answers)
        assert not [line for line in sessions if line.split(None, 1)[0] == str(self.process.pid)
                    and ("huey" in line or "_job_runner" in line)]
        for user in (DRYDOCK, READER):  # the admin creates the non-admin users (cluster/README.md, step 4)
            created = requests.post(f"{self.uri}/api/2.0/mlflow/users/create", auth=ADMIN, timeout=30,
                                    json={"username": user[0], "password": user[1]})
            assert created.status_code == 200, created.text
        self._ready = True
        return self

    def stop(self) -> None:
        """The server and its uvicorn worker: the process group this test started."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """One server for the module (each test its own experiment and registered model)."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    server = Server(folder)
    try:
        yield server
    finally:
        server.stop()


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else set()


def _environment(key: str) -> str | None:
    return os.environ.get(key)


def test_smoke_sweep_logs_registers_and_serves_through_an_authenticated_server(mlflow_server, tmp_path, monkeypatch):
    import ray

    from pipeline.search.ray_instance import init_ray
    from pipeline.sweep import run_sweep

    for key in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    ray_was_up = ray.is_initialized()
    try:
        init_ray(None, use_gpu=False)  # while the server starts; its processes get no MLflow login
        server = mlflow_server.ready()
        assert server.default_permission == "READ"  # what lets the reader below read without a grant
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", DRYDOCK[0])  # the driver's login, as the head pod's secret
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", DRYDOCK[1])
        spec = load_spec(SMOKE, [
            f"tracking.uri={server.uri}", "tracking.experiment=smoke-server", f"tracking.registered_model={MODEL}",
            "methods={kd: {alpha: 0.5}}", "search.scheduler=fifo", "teacher.finetune.epochs=1", "train.epochs=1",
            "task.synthetic={num_train: 256, num_dev: 64, num_labels: 2}",
            "selection.latency={device: cpu, batch_size: 8, seq_length: 32, shapes: [8x32], warmup: 1, min_runs: 3, min_seconds: 0.05}",
        ])
        workdir = tmp_path / "work"
        frame = run_sweep(spec, workdir)
        if not ray_was_up:  # the trials ran without the login: only the driver needs it
            assert ray.get(ray.remote(num_cpus=0)(_environment).remote("MLFLOW_TRACKING_PASSWORD")) is None
    finally:
        if not ray_was_up:
            ray.shutdown()

    assert len(frame) == 1 and frame.iloc[0]["status"] == "finished", frame.to_dict("records")
    row = frame.iloc[0]
    assert bool(row["pareto"]) and row["latency_ms"] > 0

    # runs, as the sweep's own (non-admin) user reads them back from the server
    client = MlflowClient(server.uri, registry_uri=server.uri)
    experiment = client.get_experiment_by_name("smoke-server")
    assert experiment.artifact_location.startswith("mlflow-artifacts:"), experiment.artifact_location
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("drydock.role") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0]
    assert parent.data.metrics["teacher/accuracy"] > 0
    assert parent.data.metrics["select/pareto_size"] == 1.0
    assert parent.data.tags["drydock.champion_version"] == "1"
    assert len(children) == 1 and children[0].info.run_id == row["mlflow_run_id"]
    child = children[0]
    assert child.info.status == "FINISHED" and child.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert child.data.metrics["final/accuracy"] == pytest.approx(row["metric"])
    assert child.data.metrics["latency/p50_ms"] == pytest.approx(row["latency_ms"])

    # artifacts went through the server: they are in its destination, none in the work directory
    stored = _files(server.artifacts)
    exp_id = experiment.experiment_id
    assert f"{exp_id}/{parent.info.run_id}/artifacts/report/report.md" in stored
    assert f"{exp_id}/{parent.info.run_id}/artifacts/results.parquet" in stored
    assert f"{exp_id}/{child.info.run_id}/artifacts/student/config.json" in stored
    assert any(p.startswith(f"{exp_id}/models/") and p.endswith("/MLmodel") for p in stored), sorted(stored)
    local = _files(workdir)
    assert not [p for p in local if p.endswith("MLmodel") or "mlartifacts" in p or p.endswith("mlflow.db")], sorted(local)
    reported = pd.read_parquet(client.download_artifacts(parent.info.run_id, "results.parquet", str(tmp_path)))
    assert reported["mlflow_run_id"].tolist() == [child.info.run_id]

    # the registry: one version from the trial's run, carrying the champion alias
    versions = client.search_model_versions(f"name='{MODEL}'")
    assert [v.version for v in versions] == ["1"]
    champion = client.get_model_version_by_alias(MODEL, CHAMPION)
    assert champion.version == "1" and champion.run_id == child.info.run_id
    assert float(champion.tags["metric"]) == pytest.approx(row["metric"]) and champion.tags["trial_id"] == row["trial_id"]

    # a consumer with its own login (read-only: the server's default permission), nothing else:
    # the model's files come through the server, which holds the only copy outside the work directory
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", READER[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", READER[1])
    with tracking(server.uri):  # mlflow.set_tracking_uri, undone afterwards
        model = mlflow.pyfunc.load_model(f"models:/{MODEL}@{CHAMPION}")
    out = model.predict(["a short sentence to classify", "and a second one"])
    labels = set(json.loads((Path(row["student_path"]) / "config.json").read_text())["id2label"].values())
    assert list(out.columns) == ["label", "score"] and len(out) == 2
    assert set(out["label"]) <= labels and out["score"].between(0, 1).all(), (out, labels)

    # the server really checks: no login → 401; the read-only consumer may not move the alias → 403
    alias = f"{server.uri}/api/2.0/mlflow/registered-models/alias"
    anonymous = requests.get(alias, params={"name": MODEL, "alias": CHAMPION}, timeout=30)
    assert anonymous.status_code == 401
    assert requests.get(alias, params={"name": MODEL, "alias": CHAMPION}, auth=READER, timeout=30).status_code == 200
    moved = requests.post(alias, auth=READER, timeout=30, json={"name": MODEL, "alias": CHAMPION, "version": "1"})
    assert moved.status_code == 403


def test_a_sweep_that_may_not_write_to_its_experiment_or_model_stops_before_any_work(mlflow_server, tmp_path, monkeypatch):
    """An experiment or registered model another user created (here the admin, as a person in
    the UI would) can be read by drydock's user but not written: the server says so only at the
    first write, the parent run after the teacher stage or the registration after every trial.
    The sweep must stop at once, name the field, and leave nothing behind."""
    from pipeline.sweep import run_sweep

    server = mlflow_server.ready()
    for path, name in (("experiments/create", "owned-by-admin"), ("registered-models/create", "owned-by-admin-student")):
        created = requests.post(f"{server.uri}/api/2.0/mlflow/{path}", auth=ADMIN, json={"name": name}, timeout=30)
        assert created.status_code == 200, created.text
    for key in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", DRYDOCK[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", DRYDOCK[1])
    cases = {
        "tracking.experiment": ["tracking.experiment=owned-by-admin"],
        "tracking.registered_model": ["tracking.experiment=drydock-own", "tracking.registered_model=owned-by-admin-student"],
    }
    for field, overrides in cases.items():
        spec = load_spec(SMOKE, [f"tracking.uri={server.uri}", "methods={kd: {alpha: 0.5}}", *overrides])
        workdir = tmp_path / field
        messages: list[str] = []
        with pytest.raises(DrydockError) as refused:
            run_sweep(spec, workdir, log=messages.append)
        assert str(refused.value).startswith(f"{field}: the MLflow user 'drydock' may not write to the "), str(refused.value)
        assert "403" in str(refused.value) and "EDIT" in str(refused.value)
        assert messages == [] and _files(workdir) == set()  # nothing prepared, no teacher, no run folder
    # the refused objects are as the admin left them: no run, no version, no tag
    client = MlflowClient(server.uri, registry_uri=server.uri)
    experiment = client.get_experiment_by_name("owned-by-admin")
    assert WRITER_TAG not in experiment.tags and not client.search_runs([experiment.experiment_id])
    assert WRITER_TAG not in client.get_registered_model("owned-by-admin-student").tags
