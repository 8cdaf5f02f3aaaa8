"""The search as the sweep's process shows it: done / running / pending, each trial's line, the
heartbeat, the terminal's table. Every clock is injected."""

from __future__ import annotations

import io

from pipeline.search.trial_table import Counts, SweepBoard
from pipeline.training.step_bar import Heartbeat
from tests.clock import Clock


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
