"""The lock `drydock sweep` and `drydock retrain` share (pipeline/lock.py), held by another process:
a sweep refuses at once naming the holder, a retrain says "skipped"; neither waits, neither starts
any work, and the OS frees the lock when its holder dies."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.lock import spec_lock

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "sweeps" / "smoke.yaml"

# A process that holds the spec's lock, as a running sweep or retrain does, until it is killed.
HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pipeline.lock import spec_lock
    with spec_lock(Path(sys.argv[1]), sys.argv[2]):
        print("held", flush=True)
        sys.stdin.read()
""")


@contextmanager
def held_by(folder: Path, purpose: str) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), purpose], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def holder_pattern(purpose: str, pid: int) -> str:
    return rf"{purpose}, pid {pid} on {re.escape(socket.gethostname())}, since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d"


def test_a_sweep_refuses_at_once_while_a_retrain_holds_the_spec_lock(tmp_path, capsys):
    from pipeline.cli.main import main

    workdir = tmp_path / "runs"
    with held_by(workdir / "smoke", "drydock retrain smoke") as holder:
        code = main(["sweep", str(SMOKE), "--workdir", str(workdir)])
    err = capsys.readouterr().err
    assert code == 1
    assert re.search(rf"^error: drydock sweep smoke: another run of this spec holds its lock: "
                     rf"{holder_pattern('drydock retrain smoke', holder.pid)} .*; it was not started", err, re.M), err
    assert sorted(p.name for p in (workdir / "smoke").iterdir()) == [".drydock.lock"]  # no run, no state, no cache
    assert not (workdir / "cache").exists() and not (workdir / "mlflow.db").exists()


def test_a_retrain_skips_while_a_sweep_holds_the_spec_lock(tmp_path, capsys):
    from pipeline.cli.main import main

    workdir = tmp_path / "runs"
    with held_by(workdir / "smoke", "drydock sweep smoke") as holder:
        code = main(["retrain", str(SMOKE), "--workdir", str(workdir)])
    out = capsys.readouterr().out.strip()
    assert code == 1 and len(out.splitlines()) == 1
    assert re.match(rf"drydock retrain smoke: skipped: another run of this spec holds its lock: "
                    rf"{holder_pattern('drydock sweep smoke', holder.pid)}", out), out
    assert not (workdir / "smoke" / "retrain.json").exists()


def test_the_api_raises_sweep_locked_naming_the_holder_before_any_work(tmp_path):
    """`drydock.sweep` and `drydock.retrain` refuse as the commands do, as a typed error a caller
    can catch (and the CLI maps to exit 1): the holder's line is on it, nothing was written."""
    import drydock

    workdir = tmp_path / "runs"
    for call, holds in ((drydock.sweep, "drydock retrain smoke"), (drydock.retrain, "drydock sweep smoke")):
        with held_by(workdir / "smoke", holds) as holder:
            try:
                call(SMOKE, workdir)
            except drydock.SweepLocked as e:
                assert e.exit_code == 1
                assert re.match(holder_pattern(holds, holder.pid), e.holder), e.holder
                assert holds in str(e) and "another run of this spec holds its lock" in str(e)
            else:
                raise AssertionError(f"{call.__name__} ran while {holds} held the lock")
    assert sorted(p.name for p in (workdir / "smoke").iterdir()) == [".drydock.lock"]
    assert not (workdir / "cache").exists() and not (workdir / "mlflow.db").exists()


def test_the_lock_is_free_once_its_holder_dies(tmp_path):
    with held_by(tmp_path, "drydock sweep smoke") as holder:
        holder.kill()  # no clean exit: the OS drops the lock with the process
        holder.wait()
        with spec_lock(tmp_path, "drydock retrain smoke"):
            assert "drydock retrain smoke" in (tmp_path / ".drydock.lock").read_text()
