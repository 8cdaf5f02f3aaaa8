"""Errors that mean "the user gave us something wrong", as opposed to bugs.

The CLI prints a `DrydockError` as one clear line per problem and exits 2, with no traceback;
anything else is a bug and keeps its traceback. Raising one of these must happen before any
expensive work starts (tokenizing, training), so a typo costs seconds, not an hour.
"""

from __future__ import annotations


class DrydockError(Exception):
    """A user mistake: bad spec, missing file or column, unknown label, empty split."""

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class SpecError(DrydockError):
    """The sweep spec does not validate; each problem names its field path."""


class DataError(DrydockError):
    """The task's data cannot be used: a missing file or column, a bad label, an empty split."""
