"""Progress on a terminal and in a log, and the command's log levels (issue #23, items 2 and 5).

Every clock is injected: the text, the time left and the heartbeat's throttling are checked on
given values, and nothing here waits or starts Ray.
"""

from __future__ import annotations

import io
import logging
import os
import sys

import pytest

from pipeline.cli import logs
from pipeline.cli.main import build_parser, main
from pipeline.search.progress import Counts, SweepBoard
from pipeline.training import progress
from pipeline.training.progress import Activity, Heartbeat, StepDisplay, display_mode, format_duration, progress_text, time_left


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


# ----------------------------------------------------------------------------------------------
# the text: steps, metric, time left
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# one run in this process (the teacher): heartbeat lines in a log
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# the sweep: done / running / pending, each trial's line, the heartbeat
# ----------------------------------------------------------------------------------------------


def test_counts_follow_the_trials_events():
    board = SweepBoard(5, "eval/accuracy", clock=Clock())
    assert board.counts() == Counts(0, 0, 5)
    board.already_done(["kd-1-s0"])  # a resumed search: finished before
    board.started("kd-2-s0")
    board.started("kd-3-s0")
    assert board.counts() == Counts(1, 2, 2)
    board.ended("kd-2-s0")
    board.recovered("kd-3-s0")  # Tune retries it: it waits again
    assert board.counts() == Counts(2, 0, 3)
    board.started("kd-3-s0")
    board.started("kd-4-s0")
    board.ended("kd-3-s0")
    board.ended("kd-4-s0")
    board.started("kd-5-s0")
    assert board.counts() == Counts(4, 1, 0)
    assert board.counts().text() == "search: 4 done, 1 running, 0 pending"


def test_a_trials_line_counts_down_between_its_evaluations():
    clock = Clock()
    board = SweepBoard(2, "eval/accuracy", clock=clock)
    board.started("kd-3")
    clock.tick(45)
    assert board.trial_text("kd-3") == "trial kd-3: started 45s ago, no evaluation yet"
    clock.tick(15)
    line = board.reported("kd-3", {"step": 120, "total_steps": 500, "eval/accuracy": 0.81, "progress": 0.24})
    assert line == "trial kd-3: 120/500 steps, accuracy 0.8100, ~3m10s left"
    clock.tick(10)
    assert board.trial_text("kd-3") == "trial kd-3: 120/500 steps, accuracy 0.8100, ~3m00s left"
    # the second report: paced between the two (20 s for 80 steps), start-up left out
    clock.tick(10)
    assert board.reported("kd-3", {"step": 200, "total_steps": 500, "eval/accuracy": 0.84}) == \
        "trial kd-3: 200/500 steps, accuracy 0.8400, ~1m15s left"
    assert board.rows() == [("kd-3", "200/500", "accuracy 0.8400", "~1m15s")]
    # the trial driver's final report carries no step: not a progress line
    assert board.reported("kd-3", {"drydock_final": 1.0, "eval/accuracy": 0.84}) is None


def test_a_log_gets_no_more_than_one_line_per_trial_per_15_seconds():
    clock = Clock()
    board = SweepBoard(3, "eval/accuracy", clock=clock, heartbeat=Heartbeat(15.0, clock))
    board.started("a")
    clock.tick(5)
    board.started("b")
    lines: list[tuple[int, str]] = []
    reported_at = {20: "a", 33: "b"}  # an evaluation line counts as the trial's beat
    for second in range(1, 61):  # Tune's loop calls on_step_end many times a second: once a second here
        clock.tick(1)
        if second in reported_at:
            lines.append((second, board.reported(reported_at[second], {"step": second, "total_steps": 100, "eval/accuracy": 0.5})))
        lines += [(second, line) for line in board.heartbeats()]
        lines += [(second, line) for line in board.heartbeats()]  # asked again at once: nothing new
    said = [(second, line.split(":")[0]) for second, line in lines]
    # a (started at 0): beat at 15, report at 25, beats at 40, 55; b (started at 5): beats at 20, 35,
    # report at 38, beat at 53 (seconds since a started)
    assert said == [(10, "trial a"), (15, "trial b"), (20, "trial a"), (30, "trial b"), (33, "trial b"), (35, "trial a"),
                    (48, "trial b"), (50, "trial a")]
    assert lines[0][1] == "trial a: started 15s ago, no evaluation yet"
    board.ended("a")
    clock.tick(30)
    assert [line.split(":")[0] for line in board.heartbeats()] == ["trial b"]


def test_the_terminal_table_lists_the_running_trials_under_the_counts():
    from rich.console import Console

    clock = Clock()
    board = SweepBoard(3, "eval/accuracy", clock=clock)
    board.started("kd-a")
    board.started("kd-b")
    clock.tick(60)
    board.reported("kd-a", {"step": 120, "total_steps": 500, "eval/accuracy": 0.81})
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(board)
    text = console.export_text()
    assert text.splitlines()[0].strip() == "search: 0 done, 2 running, 1 pending"
    assert "kd-a" in text and "120/500" in text and "accuracy 0.8100" in text and "~3m10s" in text
    assert "kd-b" in text and "starting (1m00s)" in text


# ----------------------------------------------------------------------------------------------
# the loop reports how far it is, and feeds the display
# ----------------------------------------------------------------------------------------------


def test_the_loop_reports_step_and_total_and_feeds_the_display(monkeypatch):
    from pipeline.config import TrainConfig
    from pipeline.training import loop
    from tests.contract.test_method_contract import _Task, tiny_dataset
    from tests.unit.training.test_loop import kd_method

    shown: list[str] = []

    class Recording(StepDisplay):  # a log's display with no wait between heartbeats
        def __init__(self, label: str, total: int) -> None:
            super().__init__(label, total, mode="lines", every=0.0, emit=shown.append)

    monkeypatch.setattr(loop, "StepDisplay", Recording)
    monkeypatch.setattr(loop, "display_mode", lambda: "lines")
    reporter = loop.LocalReporter()
    train = TrainConfig(max_steps=6, batch_size=8, learning_rate=1e-3, eval_every=3, warmup_ratio=0.0)
    loop.run(kd_method(), train_set=tiny_dataset(), dev={"dev": tiny_dataset(32, seed=1)}, task=_Task(), train=train, seed=0,
             reporter=reporter, progress_label="kd")
    assert [(r["step"], r["total_steps"]) for r in reporter.history] == [(3.0, 6.0), (6.0, 6.0)]
    assert [line.split(",")[0] for line in shown] == [f"kd: {s}/6 steps" for s in range(1, 7)]
    assert "accuracy" not in shown[2] and shown[3].startswith("kd: 4/6 steps, accuracy ")  # the evaluation at step 3
    assert shown[-1].endswith(", finishing")


# ----------------------------------------------------------------------------------------------
# which display, and the command's log levels
# ----------------------------------------------------------------------------------------------


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
    assert progress.LOGGER.startswith(logs.LOGGER + ".")  # -q and -v reach the progress lines too


def test_quiet_keeps_warnings_and_errors_and_drops_information(capsys, tmp_path):
    with logs.configured(logs.QUIET):
        logs.log_line("prepare: 8000 training examples")
        logs.log_line("warning: recording trial kd-1 failed")
        logging.getLogger(progress.LOGGER).info("trial kd-1: 120/500 steps")
    assert capsys.readouterr().out == "warning: recording trial kd-1 failed\n"
    # an error is the command's own line on stderr, with its exit code, whatever the level
    code = main(["-q", "validate", str(tmp_path / "missing.yaml")])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("error: ") and "missing.yaml" in captured.err


def test_lines_reach_stdout_as_print_wrote_them_and_nothing_is_left_configured(capsys, monkeypatch):
    monkeypatch.delenv(logs.RAY_LOGS_VARIABLE, raising=False)
    monkeypatch.delenv(logs.MLFLOW_LEVEL_VARIABLE, raising=False)
    with logs.configured(logs.NORMAL):
        logs.log_line("prepare: 8000 training examples")
        logging.getLogger("drydock").debug("not shown")
    assert capsys.readouterr().out == "prepare: 8000 training examples\n"
    with logs.configured(logs.VERBOSE):
        logging.getLogger("drydock").debug("shown under -v")
        logging.getLogger("pipeline.search.recorder").debug("a module's own record")
        assert os.environ[logs.RAY_LOGS_VARIABLE] == "1"  # Ray's INFO lines (pipeline.search.ray_instance)
        assert os.environ[logs.MLFLOW_LEVEL_VARIABLE] == "INFO"
    captured = capsys.readouterr()
    assert captured.out == "shown under -v\n"
    assert captured.err == "DEBUG pipeline.search.recorder: a module's own record\n"
    drydock = logging.getLogger("drydock")
    assert drydock.handlers == [] and drydock.level == logging.NOTSET and drydock.propagate
    assert logs.RAY_LOGS_VARIABLE not in os.environ and logs.MLFLOW_LEVEL_VARIABLE not in os.environ


@pytest.mark.parametrize("argv,verbosity", [
    (["sweep", "s.yaml"], logs.NORMAL),
    (["-q", "sweep", "s.yaml"], logs.QUIET),
    (["sweep", "s.yaml", "-q"], logs.QUIET),
    (["--verbose", "retrain", "s.yaml"], logs.VERBOSE),
    (["validate", "s.yaml", "-v"], logs.VERBOSE),
])
def test_v_and_q_go_before_or_after_the_command(argv, verbosity):
    assert build_parser().parse_args(argv).verbosity == verbosity


def test_v_and_q_together_are_refused(capsys):
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["sweep", "s.yaml", "-v", "-q"])
    assert refused.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# the watchdog: stages without heartbeats of their own
# ----------------------------------------------------------------------------------------------


def test_the_watchdog_names_the_stage_that_went_silent():
    clock = Clock()
    seen = Activity(clock)
    watchdog = logs.Watchdog(seen, every=15.0)
    clock.tick(16)
    assert watchdog.check() == "drydock: still working (16s so far)"
    seen.said("latency: kd-1: p50 1.20 ms, p90 1.31 ms (50 runs)")
    clock.tick(14)
    assert watchdog.check() is None
    clock.tick(6)
    assert watchdog.check() == "latency: still working (20s since its last line)"
    seen.shown()  # the watchdog's own line was shown: the next one is 15 s later, still counted from the stage's line
    clock.tick(15)
    assert watchdog.check() == "latency: still working (35s since its last line)"
    seen.said("warning: recording trial kd-1 failed")  # a warning is not a stage
    seen.shown()
    clock.tick(15)
    assert watchdog.check() == "latency: still working (15s since its last line)"
    seen.shown()  # a bar's step or a table's redraw on a terminal
    clock.tick(10)
    assert watchdog.check() is None


def test_the_handler_tells_the_watchdog_what_it_printed(capsys):
    clock = Clock()
    seen = Activity(clock)
    handler = logs.StdoutLines(seen)
    record = logging.LogRecord("drydock", logging.INFO, __file__, 1, "select: 2 Pareto configuration(s)", None, None)
    clock.tick(5)
    handler.emit(record)
    assert (seen.topic, seen.at, seen.topic_at) == ("select", 1005.0, 1005.0)
    watchdog_line = logging.LogRecord("drydock.progress", logging.INFO, __file__, 1, "select: still working", None, None)
    watchdog_line.watchdog = True
    clock.tick(15)
    handler.emit(watchdog_line)
    assert (seen.topic, seen.at, seen.topic_at) == ("select", 1020.0, 1005.0)
    assert capsys.readouterr().out == "select: 2 Pareto configuration(s)\nselect: still working\n"


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
