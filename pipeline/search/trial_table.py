"""The search as the sweep's process sees it: trials done, running and pending, and each running
trial's step, latest metric and time left.

A trial's processes log nowhere the sweep shows (`log_to_driver=False`), so its progress comes
from its evaluation reports (step, total_steps, the metrics), which reach Tune in this process
(`pipeline.search.trainer.ReportRelay`). `SweepBoard` keeps what those reports and Tune's trial events say and
turns it into text: a live table on a terminal (rich redraws it from `__rich__`), plain lines in
a log (`pipeline.training.step_bar` says which and why). It imports no Ray: the Tune callback
that feeds it is `pipeline.search.tuner.SweepProgress`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from pipeline.training.step_bar import Heartbeat, activity, format_duration, metric_text, progress_text, time_left


class Counts(NamedTuple):
    done: int
    running: int
    pending: int

    def text(self) -> str:
        return f"search: {self.done} done, {self.running} running, {self.pending} pending"


@dataclass
class TrialProgress:
    """What the sweep's process knows of one running trial."""

    started: float
    step: int = 0
    total: int = 0
    metric: tuple[str, float] | None = None
    first: tuple[float, int] | None = None  # (when, step) of its first report in this run of it
    latest_at: float | None = None

    def left(self, now: float) -> float | None:
        """Seconds to its last step. After two reports, at the pace between them (start-up and a
        resumed trial's earlier steps do not count); before, at the pace since it started. The
        time since the latest report is taken off, so a log's heartbeats count down."""
        if self.latest_at is None:
            return None
        if self.first is not None and self.step > self.first[1] and self.latest_at > self.first[0]:
            left = time_left(self.step, self.total, self.latest_at - self.first[0], self.first[1])
        else:
            left = time_left(self.step, self.total, self.latest_at - self.started)
        return None if left is None else max(0.0, left - (now - self.latest_at))


class SweepBoard:
    """The trials of one search: `total` of them, each done, running or pending."""

    def __init__(self, total: int, metric_key: str, *, clock: Callable[[], float] = time.monotonic,
                 heartbeat: Heartbeat | None = None) -> None:
        self.total, self.metric_key, self.clock = total, metric_key, clock
        self.heartbeat = heartbeat or Heartbeat(clock=clock)
        self.running: dict[str, TrialProgress] = {}
        self.done: set[str] = set()
        self.lock = threading.Lock()  # Tune's thread writes, rich's refresh thread reads

    # -- Tune's events ---------------------------------------------------------------------------
    def already_done(self, keys: Iterable[str]) -> None:
        """Trials a resumed search finished before (Tune sends them no event)."""
        with self.lock:
            self.done.update(keys)

    def started(self, key: str) -> None:
        with self.lock:
            self.done.discard(key)
            self.running[key] = TrialProgress(started=self.clock())
        self.heartbeat.said(key)

    def reported(self, key: str, result: Mapping[str, Any]) -> str | None:
        """An evaluation report: the trial's line for a log (None for a report without a step,
        such as the trial driver's final one)."""
        if "step" not in result or key not in self.running:
            return None
        now = self.clock()
        with self.lock:
            trial = self.running[key]
            trial.step = int(result["step"])
            trial.total = int(result.get("total_steps") or trial.total or trial.step)
            value = result.get(self.metric_key)
            if isinstance(value, (int, float)):
                trial.metric = (self.metric_key, float(value))
            trial.first = trial.first or (now, trial.step)
            trial.latest_at = now
        self.heartbeat.said(key)
        return self.trial_text(key)

    def ended(self, key: str) -> None:
        with self.lock:
            self.running.pop(key, None)
            self.done.add(key)
        self.heartbeat.forget(key)

    def recovered(self, key: str) -> None:
        """Tune retries the trial: it waits for resources again."""
        with self.lock:
            self.running.pop(key, None)
        self.heartbeat.forget(key)

    # -- what is shown -----------------------------------------------------------------------------
    def counts(self) -> Counts:
        with self.lock:
            done, running = len(self.done), len(self.running)
        return Counts(done, running, max(0, self.total - done - running))

    def trial_text(self, key: str) -> str:
        trial = self.running[key]
        now = self.clock()
        if trial.latest_at is None:
            return f"trial {key}: started {format_duration(now - trial.started)} ago, no evaluation yet"
        return progress_text(f"trial {key}", trial.step, trial.total, trial.metric, trial.left(now))

    def heartbeats(self) -> list[str]:
        """A log's line for every running trial silent for the heartbeat's interval."""
        with self.lock:
            keys = list(self.running)
        return [self.trial_text(key) for key in keys if self.heartbeat.due(key)]

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(trial, steps, metric, time left) per running trial, for the terminal's table."""
        now = self.clock()
        with self.lock:
            running = sorted(self.running.items())
        rows = []
        for key, t in running:
            if t.latest_at is None:
                rows.append((key, f"starting ({format_duration(now - t.started)})", "", ""))
                continue
            left = t.left(now)
            shown = "finishing" if t.step >= t.total else ("" if left is None else f"~{format_duration(left)}")
            rows.append((key, f"{t.step}/{t.total}", metric_text(*t.metric) if t.metric else "", shown))
        return rows

    def __rich__(self) -> Any:
        """What a rich `Live` redraws (a few times a second: the time left counts down)."""
        from rich.console import Group, JustifyMethod
        from rich.table import Table
        from rich.text import Text

        activity.shown()
        rows = self.rows()
        counts = Text(self.counts().text(), style="bold")
        if not rows:
            return counts
        table = Table(box=None, pad_edge=False)
        columns: tuple[tuple[str, JustifyMethod], ...] = (("trial", "left"), ("steps", "right"), ("metric", "right"), ("left", "right"))
        for name, justify in columns:
            table.add_column(name, justify=justify)
        for row in rows:
            table.add_row(*row)
        return Group(counts, table)
