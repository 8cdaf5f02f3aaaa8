"""One job's progress: its text, the time left, the heartbeat lines of a log, which display a process gets.

Every clock is injected: nothing here waits or starts Ray."""

from __future__ import annotations

import sys

import pytest

from pipeline.cli import logs
from pipeline.training import step_bar
from pipeline.training.step_bar import Heartbeat, StepDisplay, display_mode, format_duration, progress_text, time_left
from tests.clock import Clock


@pytest.mark.parametrize("seconds,shown", [(0, "0s"), (44.6, "45s"), (60, "1m00s"), (190, "3m10s"), (3599, "59m59s"),
                                           (3725, "1h02m"), (-5, "0s")])
def test_durations_read_at_a_glance(seconds, shown):
    assert format_duration(seconds) == shown


def test_step_120_of_500_after_60_seconds_leaves_3m10s():
    left = time_left(120, 500, 60.0)
    assert left == pytest.approx(190.0)  # 0.5 s a step, 380 steps to go
    assert progress_text("teacher", 120, 500, ("eval/accuracy", 0.81), left) == \
        "teacher: 120/500 steps, accuracy 0.8100, ~3m10s left"
    assert progress_text("teacher", 120, 500) == "teacher: 120/500 steps"  # no evaluation, no pace yet
    assert progress_text("teacher", 500, 500, ("eval/f1", 0.9), 0.0) == "teacher: 500/500 steps, f1 0.9000, finishing"


def test_time_left_counts_only_the_steps_done_in_this_run():
    assert time_left(0, 500, 60.0) is None and time_left(10, 500, 0.0) is None
    # resumed at step 300: 20 steps in 10 s is 0.5 s a step, 180 to go
    assert time_left(320, 500, 10.0, start_step=300) == pytest.approx(90.0)
    assert time_left(300, 500, 10.0, start_step=300) is None


def test_a_log_gets_at_most_one_heartbeat_per_15_seconds_and_none_right_after_an_evaluation():
    clock, lines = Clock(), []
    display = StepDisplay("teacher", 500, mode="lines", clock=clock, emit=lines.append, every=15.0)
    for step in range(1, 121):  # 120 steps, half a second each: 60 s
        clock.tick(0.5)
        display.advance(step)
    assert lines == ["teacher: 30/500 steps, ~3m55s left", "teacher: 60/500 steps, ~3m40s left",
                     "teacher: 90/500 steps, ~3m25s left", "teacher: 120/500 steps, ~3m10s left"]
    clock.tick(5)  # an evaluation: the stage logs its own line; the next heartbeat waits 15 s from it
    display.evaluated("eval/accuracy", 0.81)
    lines.clear()
    for step in range(121, 141):  # 10 s more: no line
        clock.tick(0.5)
        display.advance(step)
    assert lines == []
    for step in range(141, 151):  # 15 s after the evaluation
        clock.tick(0.5)
        display.advance(step)
    assert lines == ["teacher: 150/500 steps, accuracy 0.8100, ~3m07s left"]  # 80 s for 150 steps


def test_nothing_is_shown_where_progress_is_off_and_no_bar_is_drawn_in_a_log():
    clock, lines = Clock(), []
    off = StepDisplay("train", 10, mode="off", clock=clock, emit=lines.append)
    logged = StepDisplay("train", 10, mode="lines", clock=clock, emit=lines.append)
    for step in range(1, 11):
        clock.tick(100)
        off.advance(step)
    assert lines == [] and off.bar is None and logged.bar is None


def test_a_resumed_run_is_paced_from_its_first_step_in_this_process():
    clock, lines = Clock(), []
    display = StepDisplay("train", 500, mode="lines", clock=clock, emit=lines.append, every=15.0)
    clock.tick(30)  # loading the checkpoint is not a step (and is a silence: the next step says so)
    display.phase("finetune", 300)
    for step in range(301, 331):
        clock.tick(0.5)
        display.advance(step)
    assert lines == ["train: 301/500 steps, ~1m40s left"]  # 0.5 s a step, not 30.5 s for 301 steps


def test_heartbeat_waits_its_interval_from_a_keys_first_sight():
    clock = Clock()
    beat = Heartbeat(15.0, clock)
    assert not beat.due("a")  # first sight: the wait starts
    clock.tick(14.9)
    assert not beat.due("a")
    clock.tick(0.1)
    assert beat.due("a") and not beat.due("a")
    beat.forget("a")
    assert not beat.due("a")


class _Terminal:
    def __init__(self, stream) -> None:
        self.stream = stream

    def isatty(self) -> bool:
        return True

    def __getattr__(self, name):
        return getattr(self.stream, name)


def test_a_terminal_gets_the_live_display_a_log_gets_lines_and_quiet_gets_none(monkeypatch):
    assert display_mode() == "off"  # drydock as a library: progress is the command's business
    with logs.configured(logs.NORMAL):
        assert display_mode() == "lines"  # pytest's capture is not a terminal
        monkeypatch.setattr(sys, "stdout", _Terminal(sys.stdout))
        assert display_mode() == "lines"  # stderr is still a file: bars there would fill it
        monkeypatch.setattr(sys, "stderr", _Terminal(sys.stderr))
        assert display_mode() == "live"
    with logs.configured(logs.QUIET):
        assert display_mode() == "off"
    assert step_bar.LOGGER.startswith(logs.LOGGER + ".")  # -q and -v reach the progress lines too
