"""`drydock retrain` as a scheduler runs it: twice unchanged → the work is done once; after the
training data changes → it retrains and registers. Real CLI, Ray, MLflow; SST-2 rows in a
temporary GLUE folder so the test can change the data; the work location is a `file://` URI and
every run starts with an empty cache (a CronJob's fresh pod), so all a run knows of the last one
comes from the location."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray

API_CALL = """
import json, logging, sys
import drydock
levels = lambda: {n: logging.getLogger(n).level for n in ("", "mlflow", "drydock")}
before = levels()
result = drydock.retrain(sys.argv[1], sys.argv[2])
print("REPORT " + json.dumps({
    "outcome": result.outcome, "details": result.details, "summary": result.summary,
    "ray_running": "ray" in sys.modules and sys.modules["ray"].is_initialized(),
    "levels_changed": {n: [before[n], v] for n, v in levels().items() if v != before[n]},
}, default=str))
"""


def _glue_copy(glue_dir: Path, target: Path, train_rows: int) -> Path:
    sst2 = target / "SST-2"
    sst2.mkdir(parents=True, exist_ok=True)
    lines = (glue_dir / "SST-2" / "train.tsv").read_text().splitlines(keepends=True)
    (sst2 / "train.tsv").write_text("".join(lines[: train_rows + 1]))
    dev = (glue_dir / "SST-2" / "dev.tsv").read_text().splitlines(keepends=True)
    (sst2 / "dev.tsv").write_text("".join(dev[:129]))
    return target


@pytest.mark.slow
def test_retrain_does_the_work_once_and_again_after_the_data_changes(tmp_path, glue_dir):
    data = _glue_copy(glue_dir, tmp_path / "glue", train_rows=256)
    spec = yaml.safe_load((ROOT / "sweeps" / "smoke.yaml").read_text())
    spec.update({
        "name": "retrain",
        "task": {"name": "sst2", "source": "glue_dir", "glue_dir": str(data), "max_seq_length": 32},
        "methods": {"kd": {"alpha": 0.5}},
        "search": {"scheduler": "fifo"},
        "tracking": {"experiment": "retrain", "registered_model": "retrain-student"},
    })
    spec["teacher"]["tokenizer"] = {"vocab_size": 300}
    spec["teacher"]["finetune"]["epochs"] = 1
    spec["train"]["epochs"] = 1
    spec["selection"]["latency"].update({"min_runs": 3, "min_seconds": 0.2})
    spec_file = tmp_path / "retrain.yaml"
    spec_file.write_text("# drydock retrain retrain.yaml\n" + yaml.safe_dump(spec))
    # The work location is a file:// URI, and each run starts with an empty cache, as a CronJob's
    # fresh pod would: what a run knows of the last one comes from the location alone.
    workdir = tmp_path / "w"
    cmd = [sys.executable, "-m", "pipeline.cli", "retrain", str(spec_file), "--workdir", workdir.as_uri()]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    caches = iter(range(3))
    run = lambda: subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900,
                                 env={**os.environ, "DRYDOCK_CACHE_DIR": str(tmp_path / f"cache-{next(caches)}")})

    first = run()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "retrained (data, spec, teacher changed)" in first.stdout.splitlines()[-1]
    assert "champion retrain-student v1" in first.stdout.splitlines()[-1]

    started = time.time()
    second = run()
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.splitlines()[-1].startswith("drydock retrain retrain: nothing changed since ")
    assert time.time() - started < 60
    assert len(list((workdir / "retrain" / "runs").iterdir())) == 1  # no second sweep run

    _glue_copy(glue_dir, data.parent / "glue", train_rows=320)  # new training data arrived
    # the third run through the Python API, as an Airflow task calls it: the same work, its result
    # typed, the process's logging left as it was, and the Ray the call started gone with it
    third = subprocess.run([sys.executable, "-c", API_CALL, str(spec_file), workdir.as_uri()], cwd=cwd, capture_output=True,
                           text=True, timeout=900, env={**os.environ, "DRYDOCK_CACHE_DIR": str(tmp_path / f"cache-{next(caches)}"),
                                                        "PYTHONPATH": str(ROOT)})
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    report = json.loads(next(line for line in third.stdout.splitlines() if line.startswith("REPORT "))[len("REPORT "):])
    assert report["outcome"] == "retrained" and report["details"]["changed"] == ["data", "teacher"]
    assert report["details"]["champion"] in ("retrain-student v1", "retrain-student v2")  # moves only on improvement
    assert report["details"]["finished"] == report["details"]["trials"] == 1
    assert report["summary"].startswith("drydock retrain retrain: retrained (data, teacher changed); 1/1 trials finished")
    assert report["ray_running"] is False and report["levels_changed"] == {}
    assert len(list((workdir / "retrain" / "runs").iterdir())) == 2
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    assert len(client.search_model_versions("name='retrain-student'")) == 2  # the new student registered
    versions = client.search_model_versions("name='retrain-student'")
    assert all(v.tags["student_path"].startswith(workdir.as_uri() + "/retrain/runs/") for v in versions)
    assert list(cwd.iterdir()) == []  # nothing written under the current folder


def test_retrain_with_a_bad_spec_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntask: {name: sst2, source: glue_dir}\nteacher: {model: random}\n")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "retrain", str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.startswith("error: ")
