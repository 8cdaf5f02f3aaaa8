"""The suite's two tiers: `make test` (the README's command, under 10 minutes on two cores) runs
every test not marked `slow`, `make test-slow` runs the rest, and CI runs both, so a test marked
`slow` still guards main; only the inner loop skips it (docs/development.md, "The two tiers")."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest_line(target: str) -> list[str]:
    """The pytest command `make TARGET` would run (dry run: nothing is built or started)."""
    out = subprocess.run(["make", "-n", target, "BIN=.venv/bin"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if " -m pytest " in line]
    assert len(lines) == 1, out
    return shlex.split(lines[0])


def _marker_expression(argv: list[str]) -> str | None:
    # `-m pytest` is the interpreter's; the marker expression is the `-m` after it
    rest = argv[argv.index("pytest") + 1 :]
    return rest[rest.index("-m") + 1] if "-m" in rest else None


def test_make_test_and_make_test_slow_split_the_suite_on_the_slow_marker():
    assert _marker_expression(_pytest_line("test")) == "not slow"
    assert _marker_expression(_pytest_line("test-slow")) == "slow"
    assert _marker_expression(_pytest_line("test-all")) is None


def test_ci_runs_both_tiers_after_lint():
    commands = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [c for c in commands if c.startswith("make ")]
    assert commands == ["make lint", "make test", "make test-slow"]


def test_unit_and_contract_tests_are_never_slow():
    """The inner loop keeps every unit and contract test: the slow tier is for scenarios that run
    whole sweeps, not for a unit test that grew slow (make it fast instead)."""
    marked = [str(p.relative_to(ROOT)) for folder in ("unit", "contract") for p in (ROOT / "tests" / folder).rglob("test_*.py")
              if p.name != Path(__file__).name and re.search(r"pytest\.mark\.slow\b", p.read_text())]
    assert marked == []


def test_the_slow_marker_is_registered_and_documented():
    assert '"slow:' in (ROOT / "pyproject.toml").read_text()  # --strict-markers refuses an unregistered one
    docs = (ROOT / "docs" / "development.md").read_text()
    assert "make test-slow" in docs and "The two tiers" in docs
