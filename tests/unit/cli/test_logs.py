"""The command's log levels (-q, -v), where its lines go, and the watchdog that speaks up when a
stage without heartbeats of its own goes quiet."""

from __future__ import annotations

import logging
import os

import pytest

from pipeline.cli import logs
from pipeline.cli.main import build_parser, main
from pipeline.training import step_bar
from pipeline.training.step_bar import Activity
from tests.clock import Clock


def test_quiet_keeps_warnings_and_errors_and_drops_information(capsys, tmp_path):
    with logs.configured(logs.QUIET):
        logs.log_line("prepare: 8000 training examples")
        logs.log_line("warning: recording trial kd-1 failed")
        logging.getLogger(step_bar.LOGGER).info("trial kd-1: 120/500 steps")
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
