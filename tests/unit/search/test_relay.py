"""Reports reach Tune through a file the Train controller appends to, not through an actor of
their own. (The trainer that starts no Ray Data actor: test_trainer.py.)"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from pipeline.search.relay import ReportRelay, forward_reports, relayed_reports


def _forward_in_thread(path):
    got, done = [], threading.Event()
    thread = threading.Thread(target=forward_reports, args=(path, got.append, done), daemon=True)
    thread.start()
    return got, done, thread


def test_reports_reach_tune_in_order_and_a_partial_line_waits_for_its_end(tmp_path):
    path = tmp_path / "reports.jsonl"
    got, done, thread = _forward_in_thread(path)  # the file does not exist yet: nothing, no error
    time.sleep(0.3)
    assert got == []
    with open(path, "a") as f:
        f.write(json.dumps({"step": 1, "eval/loss": 0.5}) + "\n" + '{"step": 2, "eval/lo')
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # several more looks: the half-written record must still be held back
    assert got == [{"step": 1, "eval/loss": 0.5}]
    with open(path, "a") as f:
        f.write('ss": NaN}\n' + json.dumps({"step": 3, "eval/loss": 0.25}) + "\n")
    done.set()  # written before the run ended: both must still be delivered
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert [r["step"] for r in got] == [1, 2, 3]
    assert math.isnan(got[1]["eval/loss"]) and got[2]["eval/loss"] == 0.25


def test_the_relay_writes_rank_zeros_metrics_and_the_checkpoint_path(tmp_path):
    relay = ReportRelay(tmp_path / "reports.jsonl")
    relay.after_report(None, [{"eval/accuracy": 0.75, "step": 10}, {"eval/accuracy": 0.0, "step": 10}], None)
    relay.after_report(None, [{"eval/accuracy": 0.8, "step": 20}, {"eval/accuracy": 0.0, "step": 20}],
                       SimpleNamespace(path="/ckpt/checkpoint_000001"))
    records = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert records == [
        {"eval/accuracy": 0.75, "step": 10},
        {"eval/accuracy": 0.8, "step": 20, "checkpoint_path": "/ckpt/checkpoint_000001"},
    ]


def test_relayed_reports_delivers_every_record_before_it_returns_and_cleans_up():
    got = []
    with relayed_reports(got.append) as relay:
        relay.after_report(None, [{"step": 8, "eval/accuracy": 0.5}], None)
        relay.after_report(None, [{"step": 16, "eval/accuracy": 0.75}], None)  # just before the end
        folder = Path(relay.path).parent
        assert folder.is_dir()
    assert got == [{"step": 8, "eval/accuracy": 0.5}, {"step": 16, "eval/accuracy": 0.75}]
    assert not folder.exists()
