"""A clock that moves only when a test says so: progress text, time left and heartbeats are checked on given values."""

from __future__ import annotations


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds
