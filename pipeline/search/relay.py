"""Rank 0's reports, from a Ray Train run to whoever waits on its `fit()`, without an actor.

A Ray Train run inside a Tune trial starts, besides its workers, a controller, a placement-group
cleaner and a synchronisation actor (all needed). Ray's own way to hand the reports to Tune,
`TuneReportCallback`, adds a `ray.util.queue` actor: one more Python process per trial, started
and importing on the CPUs the trials train on (the processes of a trial start one after another,
and Ray starts at most as many worker processes at once as the node has CPUs). A file does the
same here; `benchmarks/sweep_overhead.py` measures what this saves. How the trainer itself is
built is `pipeline.search.trainer`.

Imported by the trial driver (a Tune actor that already holds Ray Train) and, when Ray unpickles
`ReportRelay`, by the Train controller: it imports nothing heavier than Ray Train itself.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray.train

# Seconds between two looks at the relay file: a report reaches Tune at most this late.
POLL_S = 0.1


class ReportRelay(ray.train.UserCallback):
    """Rank 0's reports, from the Train controller to the trial driver, through a file.

    Ray's `TuneReportCallback` carries them through a `ray.util.queue.Queue`, an actor of its
    own. The controller always runs on the node of the driver that started it (Ray Train pins it
    there with a node label selector), so a file on that node does the same without a process.
    The controller appends one JSON line per report; `forward_reports` hands each complete line
    to Tune.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        record = dict(metrics[0])  # rank 0's, as TuneReportCallback does
        if checkpoint is not None:
            record["checkpoint_path"] = checkpoint.path
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")


def forward_reports(path: str | Path, report: Callable[[dict[str, Any]], None], done: threading.Event) -> None:
    """Call `report` with every record appended to `path`, in order, until `done` is set.

    After `done` is set it reads once more, so a record written before the run ended is never
    lost. Partial lines (a write in progress) wait for the next look.
    """
    offset, pending = 0, b""
    while True:
        finished = done.is_set()  # read first, look after: nothing written before `done` is missed
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        offset += len(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                report(json.loads(line))
        if finished:
            return
        done.wait(POLL_S)


@contextmanager
def relayed_reports(report: Callable[[dict[str, Any]], None]) -> Iterator[ReportRelay]:
    """A `ReportRelay` for one Train run's `RunConfig.callbacks`, with a thread that hands each of
    its records to `report` while the caller waits in `fit()` (Tune's report blocks until Tune
    takes the result, so it cannot run on the thread inside `fit()`). On exit the last records
    are delivered and the relay file removed."""
    relay_dir = tempfile.mkdtemp(prefix="drydock-reports-")  # this node's: the controller's too
    path = os.path.join(relay_dir, "reports.jsonl")
    done = threading.Event()
    thread = threading.Thread(target=forward_reports, args=(path, report, done), daemon=True)
    thread.start()
    try:
        yield ReportRelay(path)
    finally:
        done.set()
        thread.join()
        shutil.rmtree(relay_dir, ignore_errors=True)

