"""Ctrl-C or SIGTERM during the search: the sweep stops as interrupted, not as a success.

Ray Tune handles SIGINT itself: it ends its loop, saves the experiment state with the running
trials still unfinished (so `Tuner.restore` runs them again) and returns from `fit()` as if the
experiment were done; the sweep then went on to select, register and exit 0, and SIGTERM killed
the driver outright. Here both signals take Tune's same graceful path and are remembered, so the
sweep can end as interrupted after it: running trials' MLflow runs KILLED, no selection, the
run resumable, exit 130.

How Tune is asked: with `TUNE_DISABLE_SIGINT_HANDLER=1` it leaves SIGINT alone, and it always
installs its stop handler on SIGUSR1 (`ray/tune/tune.py`, `_setup_signal_catching`, Ray 2.60);
the handler here sends that. A second signal, or one before Tune's loop has its handler, stops at
once with KeyboardInterrupt, as Ctrl-C always did.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pipeline.config import SweepSpec
from pipeline.errors import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from pipeline.errors import SweepInterrupted as SweepInterrupted

TUNE_SIGINT_SWITCH = "TUNE_DISABLE_SIGINT_HANDLER"


def interrupted_message(spec: SweepSpec, run_id: str, name: str, open_trials: list[str]) -> str:
    running = f"{len(open_trials)} running trial(s) stopped and marked KILLED in MLflow" if open_trials else "no trial was running"
    return (f"interrupted by {name}: {running}; no selection ran. Run {run_id} is saved: "
            f"`drydock sweep <spec> --resume` continues it ({spec.name})")


@dataclass
class Interruption:
    signal: str | None = None  # the name of the signal that stopped the search, if one did


@contextmanager
def graceful_stop(log: Callable[[str], None] = print) -> Iterator[Interruption]:
    """Around `Tuner.fit()`, in the main thread (signals reach no other: elsewhere a no-op)."""
    seen = Interruption()
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def stop(signum: int, frame: object) -> None:
        tune_handler = signal.getsignal(signal.SIGUSR1)
        if seen.signal is not None or tune_handler in (signal.SIG_DFL, signal.SIG_IGN, None):
            raise KeyboardInterrupt
        seen.signal = signal.Signals(signum).name
        log(f"search: {seen.signal} received: stopping the running trials (they rerun on --resume); send it again to stop at once")
        os.kill(os.getpid(), signal.SIGUSR1)

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    switch = os.environ.get(TUNE_SIGINT_SWITCH)
    os.environ[TUNE_SIGINT_SWITCH] = "1"
    for s in previous:
        signal.signal(s, stop)
    try:
        yield seen
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if switch is None:
            os.environ.pop(TUNE_SIGINT_SWITCH, None)
        else:
            os.environ[TUNE_SIGINT_SWITCH] = switch
