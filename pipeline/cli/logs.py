"""The command's log on standard logging: `-v`, `-q`, and whatever a scheduler configures.

The stages write their lines through a `log: Callable[[str], None]` they are handed (`print` by
default, and tests hand a list's `append`). The command hands them `log_line`, which sends each
line to the logger LOGGER; its handler writes the message alone to stdout, as `print` did, so
what a user or a log reader sees is unchanged while a scheduler can now raise or lower it with
standard logging. Errors the command reports itself (`error: …` on stderr, the exit codes) do
not go through here.

Levels: `-q` shows warnings and errors only (the command's result, its tables or its one line,
is still printed); `-v` shows debug lines, drydock's own modules' log records on stderr, MLflow's
and Ray's INFO lines (Ray's through `DRYDOCK_RAY_LOGS=1`, which also relays the trial processes'
output: `pipeline.search.ray_instance`).

A log must show a long command alive at least every 15 s: the teacher and the trials send
heartbeats of their own every HEARTBEAT_S (`pipeline.training.step_bar`); for stages without
them (preparing data, measuring latency, registering) the `Watchdog` says which stage is still
working after WATCHDOG_S of silence, longer than a heartbeat so the two never say it together.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pipeline.training.step_bar import LOGGER as PROGRESS_LOGGER
from pipeline.training.step_bar import Activity, activity, format_duration

LOGGER = "drydock"  # the stages' lines; its child PROGRESS_LOGGER carries heartbeats and the watchdog's
VERBOSE, NORMAL, QUIET = 1, 0, -1
LEVELS = {VERBOSE: logging.DEBUG, NORMAL: logging.INFO, QUIET: logging.WARNING}
# what drydock's own modules log with `logging.getLogger(__name__)` (shown on stderr under -v)
MODULE_LOGGERS = ("pipeline", "methods")
MLFLOW_LEVEL_VARIABLE = "MLFLOW_LOGGING_LEVEL"  # read by MLflow when it is imported
RAY_LOGS_VARIABLE = "DRYDOCK_RAY_LOGS"  # pipeline.search.ray_instance: Ray at INFO, trial output relayed


def log_line(message: str) -> None:
    """The `log` callable the command hands the stages: a `warning: …` line is a warning (it
    stays under -q), every other line information."""
    level = logging.WARNING if message.startswith("warning:") else logging.INFO
    logging.getLogger(LOGGER).log(level, message)


class StdoutLines(logging.Handler):
    """Each record's message alone on stdout, as `print` wrote it.

    The stream is looked up at every line, not kept: a test's capture or rich's live table
    (which prints lines above itself) may have replaced it since. Written through `tqdm.write`,
    so a progress bar below is cleared and redrawn instead of cut through; flushed at once, so
    a log piped into a file shows the line now, not when a buffer fills."""

    def __init__(self, seen: Activity = activity) -> None:
        super().__init__()
        self.seen = seen

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            message = self.format(record)
            tqdm.write(message, file=sys.stdout)
            sys.stdout.flush()
        except Exception:
            self.handleError(record)
            return
        if getattr(record, "watchdog", False):
            self.seen.shown()
        else:
            self.seen.said(message)


WATCHDOG_S = 14.0  # silence after which a long command says it is still working


class Watchdog:
    """A line whenever the command has shown nothing for `every` seconds, naming the stage its
    latest line was about: `latency: still working (45s since its last line)`."""

    def __init__(self, seen: Activity = activity, every: float = WATCHDOG_S) -> None:
        self.seen, self.every = seen, every

    def check(self) -> str | None:
        now = self.seen.clock()
        if now - self.seen.at < self.every:
            return None
        if self.seen.topic is None:
            return f"drydock: still working ({format_duration(now - self.seen.started)} so far)"
        return f"{self.seen.topic}: still working ({format_duration(now - self.seen.topic_at)} since its last line)"

    def run(self, stop: threading.Event, poll_s: float = 1.0) -> None:
        while not stop.wait(poll_s):
            line = self.check()
            if line is not None:
                logging.getLogger(PROGRESS_LOGGER).info(line, extra={"watchdog": True})


@contextmanager
def configured(verbosity: int = NORMAL, *, watch: bool = False) -> Iterator[StdoutLines]:
    """The command's logging while it runs (`watch`: with the watchdog). Everything is put back
    afterwards, so drydock used as a library in the same process (a test) finds no leftovers."""
    saved = SavedLogging.now()
    drydock = logging.getLogger(LOGGER)
    handler = StdoutLines()
    drydock.addHandler(handler)
    drydock.setLevel(LEVELS[verbosity])
    drydock.propagate = False  # the command owns its output: a root handler would print each line twice
    if verbosity == VERBOSE:
        for name in MODULE_LOGGERS:
            module_handler = logging.StreamHandler()  # stderr
            module_handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logging.getLogger(name).addHandler(module_handler)
            logging.getLogger(name).setLevel(logging.DEBUG)
    _library_levels(verbosity)
    stop = threading.Event()
    watchdog = None
    if watch and drydock.isEnabledFor(logging.INFO):
        activity.restart()
        watchdog = threading.Thread(target=Watchdog().run, args=(stop,), name="drydock-watchdog", daemon=True)
        watchdog.start()
    try:
        yield handler
    finally:
        stop.set()
        if watchdog is not None:
            watchdog.join(timeout=5)
        saved.restore()


def _library_levels(verbosity: int) -> None:
    """MLflow at WARNING (INFO under -v), Ray's INFO lines and trial output under -v only. A
    variable the user set wins; MLflow reads its variable when imported, so its logger is set too."""
    os.environ.setdefault(MLFLOW_LEVEL_VARIABLE, "INFO" if verbosity == VERBOSE else "WARNING")
    if "mlflow" in sys.modules:
        logging.getLogger("mlflow").setLevel(os.environ[MLFLOW_LEVEL_VARIABLE].upper())
    if verbosity == VERBOSE:
        os.environ.setdefault(RAY_LOGS_VARIABLE, "1")


@contextmanager
def library(show: bool | None = None) -> Iterator[Callable[[str], None]]:
    """The Python API's logging while one call runs (`drydock.sweep(...)` in a notebook, a script,
    an Airflow task); yields the `log` callable to hand the stages. Their lines go to the LOGGER
    logger: where nothing in the process configured logging (no handler on the root logger or on
    LOGGER: a notebook, a plain script) they are shown as the command shows them, on stdout;
    otherwise they reach the caller's handlers at the caller's levels, untouched. `show` decides
    it instead. MLflow's and Ray's INFO lines are quieted as under the command, and every logger
    and variable touched, those of the libraries the call imports included, is put back after it."""
    saved = SavedLogging.now()
    bars = progress_bars()
    drydock = logging.getLogger(LOGGER)
    if show is None:
        show = not (logging.getLogger().handlers or drydock.handlers)
    if show:
        drydock.addHandler(StdoutLines())
        drydock.setLevel(logging.INFO)
        drydock.propagate = False
    _library_levels(NORMAL)
    try:
        yield log_line
    finally:
        saved.restore()
        restore_progress_bars(bars)


# The stages turn off transformers' and datasets' progress bars (`pipeline.prepare`): the switches
# are process-wide, so an API call puts them back as it found them (on, for a library it imported).
PROGRESS_BAR_SWITCHES = {
    "transformers": ("transformers.utils.logging", "is_progress_bar_enabled", "enable_progress_bar", "disable_progress_bar"),
    "datasets": ("datasets.utils.logging", "is_progress_bar_enabled", "enable_progress_bar", "disable_progress_bar"),
}


def progress_bars() -> dict[str, bool]:
    """Whether each library's bars are on now (on, for a library not imported yet: its default)."""
    import importlib

    states = {}
    for library, (module, is_on, _, _) in PROGRESS_BAR_SWITCHES.items():
        states[library] = bool(getattr(importlib.import_module(module), is_on)()) if library in sys.modules else True
    return states


def restore_progress_bars(states: dict[str, bool]) -> None:
    import importlib

    for library, (module, is_on, enable, disable) in PROGRESS_BAR_SWITCHES.items():
        if library in sys.modules:
            switches = importlib.import_module(module)
            if bool(getattr(switches, is_on)()) != states[library]:
                getattr(switches, enable if states[library] else disable)()


# Loggers a call of drydock sets the level of, itself or through a library it imports: drydock's
# own, MLflow's (`_library_levels`), Ray's (`pipeline.search.ray_instance`), transformers'
# (`pipeline.prepare.models`), Optuna's (`pipeline.search.study`), and the root logger.
SAVED_LOGGERS = (LOGGER, *MODULE_LOGGERS, "mlflow", "ray", "transformers", "optuna", "")


@dataclass
class SavedLogging:
    """The loggers and variables a command or an API call changes, as they were."""

    loggers: dict[str, tuple[int, list[logging.Handler], bool]]
    env: dict[str, str | None]

    @classmethod
    def now(cls) -> SavedLogging:
        loggers = {}
        for name in SAVED_LOGGERS:
            lg = logging.getLogger(name)
            loggers[name] = (lg.level, list(lg.handlers), lg.propagate)
        return cls(loggers, {key: os.environ.get(key) for key in (MLFLOW_LEVEL_VARIABLE, RAY_LOGS_VARIABLE)})

    def restore(self) -> None:
        """Every level as it was; handlers and propagation too for drydock's own loggers. A
        library's logger keeps the handler and propagation the library gave it when it was first
        imported during the call (Ray's, transformers'): removing them would send its lines
        through the caller's root handlers instead."""
        for name, (level, handlers, propagate) in self.loggers.items():
            lg = logging.getLogger(name)
            lg.setLevel(level)
            if name in (LOGGER, *MODULE_LOGGERS):
                lg.handlers[:] = handlers
                lg.propagate = propagate
        for key, value in self.env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
