"""A sweep whose MLflow store cannot be written stops at once, in one line, with nothing written
lost (issue 37, item 8): a read-only `mlflow.db` was read without complaint and the first write,
the parent run after the teacher stage, ended the sweep in a SQLAlchemy traceback.

Root writes to a file whatever its mode (CAP_DAC_OVERRIDE), and the suite runs as root here and in
CI: the sweep then runs without that capability (`setpriv`), so the file's mode is what stops it,
as it stops any other user."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
# out of the bounding set (what a later exec may gain) and the inheritable set (what it keeps)
WITHOUT_OVERRIDE = ["setpriv", "--inh-caps", "-dac_override,-dac_read_search", "--bounding-set", "-dac_override,-dac_read_search"]


def file_modes_stop(command: list[str], folder: Path) -> bool:
    """Whether `command` run before a program leaves it unable to write a file of mode 0444: a
    container may lack the capability to drop capabilities, or hand root more than it drops."""
    probe = folder / "mode-probe"
    probe.write_text("")
    probe.chmod(stat.S_IRUSR)
    try:
        done = subprocess.run([*command, sys.executable, "-c", f"open({str(probe)!r}, 'a').write('x')"],
                              capture_output=True, text=True, timeout=60)
    except OSError:
        return False
    finally:
        probe.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return done.returncode != 0 and "PermissionError" in done.stderr and probe.read_text() == ""


def as_a_user_whom_file_modes_stop(args: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None or not file_modes_stop(WITHOUT_OVERRIDE, folder):
            pytest.skip("running as root where setpriv cannot drop CAP_DAC_OVERRIDE: no way to make a file read-only to the sweep")
        args = [*WITHOUT_OVERRIDE, *args]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_a_read_only_mlflow_db_stops_the_sweep_before_any_work_and_is_left_as_it_was(tmp_path):
    spec = yaml.safe_load((ROOT / "sweeps" / "smoke.yaml").read_text())
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    work = tmp_path / "work"
    work.mkdir()
    # the store as an earlier sweep left it: its experiment exists, so opening it writes nothing
    made = subprocess.run([sys.executable, "-c", "import sys, mlflow; c = mlflow.MlflowClient(sys.argv[1]); "
                           "c.create_experiment('smoke', artifact_location=sys.argv[2])",
                           f"sqlite:///{work / 'mlflow.db'}", (work / "mlartifacts").as_uri()],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    db = work / "mlflow.db"
    db.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    before = hashlib.sha256(db.read_bytes()).hexdigest()

    proc = as_a_user_whom_file_modes_stop([sys.executable, "-m", "pipeline.cli", "sweep", str(spec_path), "--workdir", str(work)],
                                          tmp_path)

    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines[-1].startswith(f"error: tracking: cannot write to the MLflow tracking store sqlite:///{db}: "), lines
    assert "readonly database" in lines[-1] and "Traceback" not in proc.stderr
    assert "prepare:" not in proc.stdout + proc.stderr  # stopped before the data, the teacher and Ray
    assert not (work / "cache").exists()
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
