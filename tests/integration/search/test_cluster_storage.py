"""A cluster without a shared filesystem, simulated on this machine: a head with 0 CPUs and two
worker nodes (ray.cluster_utils.Cluster), each with its own cache and temporary folders, and the
work location on a local S3-compatible server (moto's, on 127.0.0.1). The smoke sweep runs
through the teacher (on the workers), the search, select and registration; nothing is written
under the current folder, the results and the report are in the bucket, and each worker trained
from its own node's copies of the data and the teacher, fetched from the bucket — never from the
driver's folders (before `pipeline.storage`, `--workdir s3://…` was a local folder named `s3:`,
and each worker read the driver's paths). Losing a node is not exercised here (it cost the suite
minutes and hung it under load; see the issue notes): Ray Train's retry of a lost trial on
another node is Ray's own behaviour, and what it needs from drydock, every input in the bucket,
is what this test checks."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from pipeline.config import load_spec

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _bucket_files(uri: str) -> list[str]:
    fs, base = pafs.FileSystem.from_uri(uri)
    return sorted(i.path[len(base) + 1:] for i in fs.get_file_info(pafs.FileSelector(base, recursive=True)) if i.is_file)


def test_smoke_sweep_on_a_cluster_without_a_shared_filesystem(s3, tmp_path, monkeypatch):
    import mlflow
    import pandas as pd
    import ray
    from mlflow import MlflowClient
    from ray.cluster_utils import Cluster

    from pipeline.storage import WorkStore
    from pipeline.sweep import run_sweep

    if ray.is_initialized():
        ray.shutdown()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    driver_cache = Path(os.environ["DRYDOCK_CACHE_DIR"])
    # the dashboard gives Train the State API it needs to free a lost trial's workers
    # (docs/search-on-ray.md, "The State API must be up"), on a free port: another Ray instance on
    # this machine (a second pytest worker) may hold 8265
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dashboard_port = sock.getsockname()[1]
    # Set before the cluster starts, so every Ray process inherits it: Train's placement-group
    # cleaner (on the head) asks the State API whether a trial's controller is alive, and without
    # this address it asks the instance named in /tmp/ray/ray_current_cluster, the newest on the
    # machine: another pytest worker's. It then never sees a controller that died with its node,
    # never frees that trial's placement group, and a retried trial waits for CPUs that no one
    # uses until its start patience runs out (the suite hung here when a node was killed).
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", f"http://127.0.0.1:{dashboard_port}")
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 0, "include_dashboard": True, "dashboard_port": dashboard_port})
    nodes = {}
    for name in ("a", "b"):
        (tmp_path / f"node-{name}-tmp").mkdir()
        nodes[name] = cluster.add_node(num_cpus=1, env_vars={
            "DRYDOCK_CACHE_DIR": str(tmp_path / f"node-{name}-cache"), "TMPDIR": str(tmp_path / f"node-{name}-tmp")})
    cluster.wait_for_nodes()
    # two trials, one CPU each on two one-CPU nodes: one trial per node, at the same time
    spec = load_spec(ROOT / "sweeps" / "smoke.yaml", [
        "methods={kd: {alpha: {grid: [0.3, 0.9]}}}", "search.scheduler=fifo",
        "resources.teacher_placement=workers", "train.epochs=1", "teacher.finetune.epochs=1",
        "task.synthetic={num_train: 256, num_dev: 64, num_labels: 2}",
        "resources.start_patience_s=180",  # a trial that cannot get its workers fails the test, not hangs it
    ])
    location = f"{s3}/team/sweeps"
    try:
        frame = run_sweep(spec, location, address=cluster.address, log=lambda _: None)
    finally:
        ray.shutdown()
        cluster.shutdown()

    # 1. finished through registration, and the bucket holds the record
    assert len(frame) == 2 and set(frame["status"]) == {"finished"}, frame[["trial_id", "status", "error"]].to_dict("records")
    assert all(str(p).startswith(f"{location}/smoke/runs/") and str(p).endswith("/student") for p in frame["student_path"])
    files = _bucket_files(location)
    for name in ("smoke/results.parquet", "smoke/report.md", "smoke/pareto.png", "smoke/state.json", "mlflow.db"):
        assert name in files, name
    assert any(f.startswith("teachers/") and f.endswith("/model.safetensors") for f in files)
    assert any(f.startswith("mlartifacts/") and f.endswith("model.safetensors") for f in files)  # registered students
    # Tune's state is in the bucket, its per-trial logger files are not: the driver re-uploads its
    # whole experiment folder at every experiment checkpoint (pipeline.search.tuner.without_tune_logger_files)
    tune_files = [f for f in files if "/tune/" in f]
    assert any(f.rsplit("/", 1)[-1].startswith("experiment_state-") for f in tune_files), tune_files
    assert not [f for f in tune_files if f.rsplit("/", 1)[-1] in {"result.json", "progress.csv", "params.json", "params.pkl"}
                or "events.out.tfevents" in f]
    assert list(cwd.iterdir()) == []  # nothing under the current folder

    # 2. each trial ran on its own worker node, from that node's own copies (fetched from the bucket)
    store = WorkStore.open(location)  # the driver's mirror
    node_of = {n.node_id: name for name, n in nodes.items()}
    ran_on = set()
    for trial_id, student in zip(frame["trial_id"], frame["student_path"]):
        key = store.key_of(student).rsplit("/", 1)[0]
        outcome = json.loads(store.fetch(f"{key}/outcome.json", fresh=True).read_text())
        node = node_of[outcome["node_id"]]  # a KeyError here: the trial ran on the head
        ran_on.add(node)
        metadata = json.loads((store.fetch(f"{key}/student") / "drydock.json").read_text())
        node_cache = tmp_path / f"node-{node}-cache"
        assert Path(metadata["teacher_path"]).is_relative_to(node_cache), (trial_id, metadata["teacher_path"])
        mirror = next((node_cache / "work").iterdir())
        assert (mirror / key / "student" / "config.json").is_file()  # written on the node, then pushed
        assert any(p.name.startswith("data-") for p in (mirror / "cache").iterdir())
        assert not Path(metadata["teacher_path"]).is_relative_to(driver_cache)
    assert ran_on == {"a", "b"}
    # the teacher was fine-tuned on a worker and pushed; the driver only fetched it
    assert any((tmp_path / f"node-{n}-cache").rglob("teachers/*/teacher_metrics.json") for n in nodes)

    # 3. the record is usable from the bucket alone: a consumer with a fresh mirror loads the champion
    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "consumer-cache"))
    consumer = WorkStore.open(location)
    db = consumer.fetch("mlflow.db")
    uri = f"sqlite:///{db}"
    champion = MlflowClient(uri).get_model_version_by_alias("smoke-student", "champion")
    assert champion.tags["student_path"] in set(frame["student_path"])
    mlflow.set_tracking_uri(uri)
    try:
        model = mlflow.pyfunc.load_model("models:/smoke-student@champion")
        predicted = model.predict(pd.DataFrame({"text": ["alpha beta gamma", "delta"]}))
    finally:
        mlflow.set_tracking_uri(None)
    assert len(predicted) == 2
    results = pd.read_parquet(consumer.fetch("smoke/results.parquet"))
    assert sorted(results["trial_id"]) == sorted(frame["trial_id"]) and results["pareto"].any()
