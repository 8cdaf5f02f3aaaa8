"""Progress of long work, shown the way its reader can use it.

A person at a terminal wants one place that is redrawn (a bar, a live table); a log (CI, a
Kubernetes CronJob, a RayJob's log, `make demo` piped into a file) wants plain lines that read
well afterwards and do not fill it with carriage returns. So there are three modes
(`display_mode`): `live` when stdout and stderr are both terminals; `lines` otherwise, where the
evaluation lines the stages log anyway are joined by a heartbeat, at most one every
HEARTBEAT_S per running job, so a reader (or a harness that stops silent jobs) sees the work is
alive between evaluations; `off` when the progress logger shows no INFO lines (`drydock -q`, or
drydock used as a library without configuring logging: progress is the command line's business,
and a Ray Train worker never draws).

Progress lines go to the logger LOGGER, never to a stage's `log` callable: the record a stage
writes (and its tests read) stays what it was, and a scheduler that wants the results without the
heartbeats lowers this one logger. Clocks are injected so the text is tested on given values.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Literal

LOGGER = "drydock.progress"
# A log shows a running job at least this often (between its evaluations, which may be minutes
# apart): 10 s, so a reader who expects a line every 15 s gets one even when a step is slow.
HEARTBEAT_S = 10.0

Mode = Literal["live", "lines", "off"]
logger = logging.getLogger(LOGGER)


class Activity:
    """When this process last showed its user anything: a line (and what it was about), a bar's
    step, a table's redraw. The command's watchdog (`pipeline.cli.logs`) speaks up after a silence,
    so it must hear the displays that draw without logging a line."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.restart()

    def restart(self) -> None:
        """Silence counts from now (a command starts)."""
        self.started = self.at = self.clock()
        self.topic: str | None = None  # what the latest line was about: `latency` of `latency: …`
        self.topic_at = self.started

    def shown(self) -> None:
        self.at = self.clock()

    def said(self, line: str) -> None:
        self.at = self.topic_at = self.clock()
        head, colon, _ = line.partition(":")
        if colon and 0 < len(head) <= 40 and head not in ("warning", "error"):
            self.topic = head


activity = Activity()  # this process's: every display and the command's log handler report to it


def display_mode() -> Mode:
    """How progress is shown in this process now (see the module's docstring)."""
    if not logger.isEnabledFor(logging.INFO):
        return "off"
    return "live" if _isatty(sys.stdout) and _isatty(sys.stderr) else "lines"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced by a capture, or closed
        return False


def format_duration(seconds: float) -> str:
    """Short enough for a table cell, precise enough to tell a stuck job from a slow one."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def time_left(step: int, total: int, elapsed: float, start_step: int = 0) -> float | None:
    """Seconds to `total` at the pace of the steps since `start_step` (None before one is done).

    A plain average: the steps of one run cost the same, and a moving window would swing with
    the evaluations that interrupt them."""
    done = step - start_step
    if done <= 0 or elapsed <= 0 or total <= 0:
        return None
    return max(0.0, elapsed / done * (total - step))


def metric_text(name: str, value: float) -> str:
    return f"{name.removeprefix('eval/')} {value:.4f}"


def progress_text(label: str, step: int, total: int, metric: tuple[str, float] | None = None,
                  left: float | None = None) -> str:
    """One job's progress as one line: `trial kd-3: 120/500 steps, accuracy 0.8100, ~3m10s left`.

    Deliberately not `<label>: step N: …`, the form of the evaluation lines the stages log
    (scripts and tests pick those out by it)."""
    parts = [f"{step}/{total} steps"]
    if metric is not None:
        parts.append(metric_text(*metric))
    if step >= total > 0:
        parts.append("finishing")
    elif left is not None:
        parts.append(f"~{format_duration(left)} left")
    return f"{label}: " + ", ".join(parts)


class Heartbeat:
    """At most one line per job every `every` seconds, counting the lines the job said otherwise
    (an evaluation's) as beats: a log gets a sign of life, not a second copy of each evaluation."""

    def __init__(self, every: float = HEARTBEAT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.clock = every, clock
        self.last: dict[str, float] = {}

    def said(self, key: str) -> None:
        """`key` just printed a line (it started, or logged an evaluation)."""
        self.last[key] = self.clock()

    def due(self, key: str) -> bool:
        """Whether `key` has been silent for `every` seconds; if so, the caller's line counts as said.
        A key never seen starts its wait now."""
        now = self.clock()
        last = self.last.setdefault(key, now)
        if now - last < self.every:
            return False
        self.last[key] = now
        return True

    def forget(self, key: str) -> None:
        self.last.pop(key, None)


class StepDisplay:
    """One training run in this process (the teacher in the sweep's process, `drydock train`):
    a tqdm bar with the latest metric in `live` mode (tqdm's own estimate of the time left),
    heartbeat lines in `lines` mode, nothing when `off`."""

    def __init__(self, label: str, total: int, *, mode: Mode | None = None, clock: Callable[[], float] = time.monotonic,
                 every: float = HEARTBEAT_S, emit: Callable[[str], None] | None = None) -> None:
        self.label, self.total, self.clock = label, total, clock
        self.mode = mode or display_mode()
        self.emit = emit or logger.info
        self.heartbeat = Heartbeat(every, clock)
        self.started, self.start_step, self.step = clock(), 0, 0
        self.metric: tuple[str, float] | None = None
        self.bar: Any = None
        if self.mode == "live":
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, unit="step", dynamic_ncols=True, leave=False)
        self.heartbeat.said(label)

    def phase(self, name: str, step: int) -> None:
        """A phase starts at `step` (a resumed run's first step is not counted in its pace)."""
        if self.step == 0 and step > 0:
            self.started, self.start_step = self.clock(), step
        self.step = step
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_description(f"{self.label} {name}")

    def advance(self, step: int) -> None:
        self.step = step
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            activity.shown()
        elif self.mode == "lines" and self.heartbeat.due(self.label):
            self.emit(self.text())

    def evaluated(self, name: str, value: float) -> None:
        """The latest evaluation (its own line is the stage's to log: no heartbeat right after it)."""
        self.metric = (name, float(value))
        self.heartbeat.said(self.label)
        if self.bar is not None:
            self.bar.set_postfix({name.removeprefix("eval/"): f"{value:.4f}"}, refresh=False)

    def text(self) -> str:
        left = time_left(self.step, self.total, self.clock() - self.started, self.start_step)
        return progress_text(self.label, self.step, self.total, self.metric, left)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
