"""The errors drydock raises for what is not a bug, each with the exit code the CLI maps it to.

The CLI prints a `DrydockError` as one clear line per problem and exits with its `exit_code`
(2 unless the class says otherwise), with no traceback; anything else is a bug and keeps its
traceback. Raising one of these must happen before any expensive work starts (tokenizing,
training), so a typo costs seconds, not an hour. The Python API (`drydock`) raises the same
classes, so a notebook, an Airflow task and the CLI tell the same cases apart.

This module imports nothing of drydock's or a library's: the classes are importable without torch, Ray or MLflow.
"""

from __future__ import annotations

import re

EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 1, 2, 3, 130


class DrydockError(Exception):
    """A user mistake: bad spec, missing file or column, unknown label, empty split."""

    exit_code = EXIT_USAGE

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class SpecError(DrydockError):
    """The sweep spec does not validate; each problem names its field path. `partial`: the spec
    with the fields in error (`left_out`, dotted paths) at their defaults, when that validates:
    `drydock validate` runs its other checks on it, so every problem is said in one pass; None
    otherwise."""

    def __init__(self, problems: str | list[str], partial: object | None = None, left_out: tuple[str, ...] = ()):
        super().__init__(problems)
        self.partial = partial
        self.left_out = left_out

    def about_the_rest(self, found: list[str]) -> list[str]:
        """Of the problems other checks `found` on `partial`: the new ones that concern no section
        a field was left out of. A check reads several fields of a section together (the search's
        algorithm with its budget), so a problem there may be about the default put in place of
        the user's value; such a problem waits for the next pass, never a false one now."""
        sections = {field.split(".")[0] for field in self.left_out}

        def about_a_section_left_out(problem: str) -> bool:
            named = problem.split(":", 1)[0].split(".")[0]
            return named in sections or any(f"{section}." in problem for section in sections)

        return [p for p in found if p not in self.problems and not about_a_section_left_out(p)]


class DataError(DrydockError):
    """The task's data cannot be used: a missing file or column, a bad label, an empty split."""


class SweepLocked(DrydockError):
    """Another run of the same spec and work directory holds its lock (`pipeline.lock`); nothing
    was started. Not a mistake to fix but a run to wait for: exit 1, as a failed run, so that a
    scheduler retries later. `holder` is the line the holder wrote (what, pid, host, since when)."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, holder: str = ""):
        super().__init__(message)
        self.holder = holder


class TrackingUnreachable(DrydockError):
    """The tracking server does not answer. Not the user's mistake: exit 3, not 2, and nothing
    has started."""

    exit_code = EXIT_UNREACHABLE


class SweepInterrupted(DrydockError):
    """The search stopped on SIGINT or SIGTERM; the run is saved and `--resume` continues it."""

    exit_code = EXIT_INTERRUPTED


def first_line(error: BaseException, limit: int | None = None) -> str:
    """An error said in one line, as a refusal quotes it: a library's message's first line (at most
    `limit` characters), or the error's type where the message is empty."""
    text = str(error).strip()
    return text.splitlines()[0][:limit] if text else type(error).__name__


SECRET_QUERY = re.compile(r"(token|password|passwd|secret|key|sig|signature|credential)", re.I)


def redacted(uri: str) -> str:
    """`uri` fit to print or log: the password of `scheme://user:password@host` and the values of
    query parameters named like a credential (`?token=…`) become `***`. A tracking URI may carry
    them (a spec's `${MLFLOW_URI}`), and an error message or a log line must never show them."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    if not (":" in parts.netloc.rpartition("@")[0] or any(SECRET_QUERY.search(k) for k, _ in parse_qsl(parts.query))):
        return uri  # nothing to hide: as given (urlunsplit would rewrite `sqlite:////x` as `sqlite://x`)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}{':***' if colon else ''}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if SECRET_QUERY.search(k) else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
