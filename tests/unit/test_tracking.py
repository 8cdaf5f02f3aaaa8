"""A tracking server that does not answer is named within seconds, as unreachable, exit 3 (issue
21: it took MLflow's ~245 s of retries, then exit 2 as if the user were wrong). Only the first call
is quick to give up; a server that answers is used as before, and what it says wrong stays a user
mistake, exit 2. Real MLflow clients against a closed local port and a tiny local HTTP server."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from pipeline.cli.main import main
from pipeline.config import spec_from_dict
from pipeline.errors import DrydockError
from pipeline.tracking import SweepTracker

UNREACHABLE, USAGE = 3, 2  # drydock's exit codes (pipeline/cli/main.py)

SPEC = {
    "name": "gone", "task": {"name": "synthetic", "source": "synthetic", "max_seq_length": 16},
    "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
    "methods": {"finetune": {}},
}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server():
    """A local HTTP server answering every request with the status it is given."""
    class Handler(BaseHTTPRequestHandler):
        status = 503

        def _answer(self):
            body = b'{"error_code": "ENDPOINT_NOT_FOUND", "message": "no such endpoint"}'
            self.send_response(Handler.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield Handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_sweep_against_a_closed_port_exits_3_within_seconds(tmp_path, capsys):
    uri = f"http://127.0.0.1:{closed_port()}"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "tracking": {"uri": uri}}))
    capsys.readouterr()
    started = time.monotonic()
    code = main(["sweep", str(path), "--workdir", str(tmp_path / "w")])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert code == UNREACHABLE and elapsed < 20, (code, elapsed, err)
    assert len(err) == 1 and err[0].startswith(f"error: tracking.uri: the MLflow tracking server {uri} is unreachable")


def test_a_gateway_without_its_server_is_unreachable_and_a_server_that_answers_is_used(tmp_path, server):
    handler, uri = server
    spec = spec_from_dict({**SPEC, "tracking": {"uri": uri}})
    started = time.monotonic()
    with pytest.raises(DrydockError, match=r"is unreachable: it answered 503") as unreachable:
        SweepTracker(spec, tmp_path)  # MLflow would retry a 503 for minutes
    assert time.monotonic() - started < 10 and getattr(unreachable.value, "exit_code", USAGE) == UNREACHABLE
    # a server that answers is not unreachable: what it refuses is the user's to fix (exit 2)
    handler.status = 404
    with pytest.raises(DrydockError, match=r"^tracking.uri: cannot use the MLflow tracking store") as refused:
        SweepTracker(spec, tmp_path)
    assert getattr(refused.value, "exit_code", USAGE) == USAGE


def test_a_copied_work_directory_writes_its_artifacts_into_itself(tmp_path, monkeypatch):
    """MLflow keeps absolute artifact locations in the store: a work directory copied elsewhere
    went on writing into the original. The sweep's own store is pointed at its own mlartifacts
    before MLflow opens it; the runs logged before the copy read from the copy too."""
    import shutil

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    spec = spec_from_dict(SPEC)
    first, copy = tmp_path / "first", tmp_path / "copy"
    first.mkdir()
    tracker = SweepTracker(spec, first)
    old_run = tracker.start_parent(resume=False)
    (tmp_path / "note.txt").write_text("logged before the copy")
    tracker.client.log_artifact(old_run, str(tmp_path / "note.txt"))
    assert tracker.moved_from == []
    shutil.copytree(first, copy)

    moved = SweepTracker(spec, copy)
    assert moved.moved_from == [(first / "mlartifacts").resolve().as_uri()]
    experiment = moved.client.get_experiment(moved.experiment_id)
    assert experiment.artifact_location == (copy / "mlartifacts").resolve().as_uri()
    new_run = moved.start_parent(resume=False)
    (tmp_path / "later.txt").write_text("logged after")
    moved.client.log_artifact(new_run, str(tmp_path / "later.txt"))
    assert sorted(p.name for p in (copy / "mlartifacts").rglob("*.txt")) == ["later.txt", "note.txt"]
    assert [p.name for p in (first / "mlartifacts").rglob("*.txt")] == ["note.txt"]  # the original is left alone
    assert moved.client.get_run(old_run).info.artifact_uri.startswith((copy / "mlartifacts").resolve().as_uri() + "/")
    assert SweepTracker(spec, copy).moved_from == []  # once moved, nothing more to move
