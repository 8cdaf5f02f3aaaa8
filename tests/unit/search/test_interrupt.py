"""The signal handling around Tune's `fit()` (`pipeline.search.interrupt`), in this process.

Tune's own stop handler is stood in for by one that notes SIGUSR1, where Tune installs it
(`ray/tune/tune.py`, `_setup_signal_catching`); the sweep through Ray is
tests/integration/search/test_interrupt.py."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from pipeline.search.interrupt import TUNE_SIGINT_SWITCH, graceful_stop


@pytest.fixture(autouse=True)
def main_thread():
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        pytest.skip("not in the main thread: a SIGTERM sent here would end the test process")


@pytest.fixture
def tune_handler():
    asked: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: asked.append(signum))
    yield asked
    signal.signal(signal.SIGUSR1, previous)


def test_sigterm_takes_tunes_graceful_stop_and_is_remembered_and_a_second_one_stops_at_once(tune_handler):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    lines: list[str] = []
    with graceful_stop(lines.append) as stopped:
        assert os.environ[TUNE_SIGINT_SWITCH] == "1"  # Tune leaves SIGINT to us
        os.kill(os.getpid(), signal.SIGTERM)
        assert stopped.signal == "SIGTERM" and tune_handler == [signal.SIGUSR1]
        assert lines == ["search: SIGTERM received: stopping the running trials (they rerun on --resume); send it again to stop at once"]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert {s: signal.getsignal(s) for s in before} == before and TUNE_SIGINT_SWITCH not in os.environ


def test_a_signal_before_tune_listens_stops_at_once():
    previous = signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # Tune's loop has not started: SIGUSR1 would kill the process
    try:
        with graceful_stop(lambda _: None) as stopped:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
        assert stopped.signal is None
    finally:
        signal.signal(signal.SIGUSR1, previous)
