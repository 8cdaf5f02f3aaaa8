"""Every module's unit tests are in the file named after it, so a reader of `pipeline/x/y.py`
finds its tests in `tests/unit/x/test_y.py` (`methods/_z.py`: `tests/unit/methods/test_z.py`)
without a search, and a module without any stands out here.

The rule is a pure function of two lists of paths, so it is shown to fail on made-up ones too.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Modules whose unit tests live in another module's file (none now).
ELSEWHERE: set[str] = set()
# Modules that have no unit test of their own yet (integration tests run them): each one waits for
# a test named after it, and leaves this list when it gets one.
NOT_YET: set[str] = set()


def expected_test(module: str) -> str | None:
    """The unit test file of a module's path relative to the root; None for `__init__` and
    `__main__`, which hold a package's registry or entry point, tested where that is used."""
    path = Path(module)
    if path.stem in ("__init__", "__main__"):
        return None
    folder = Path("tests/unit", *path.parts[1:-1]) if path.parts[0] == "pipeline" else Path("tests/unit/methods")
    return str(folder / f"test_{path.stem.lstrip('_')}.py")


def untested(modules: list[str], tests: set[str]) -> list[str]:
    return [m for m in modules if (expected := expected_test(m)) is not None and expected not in tests]


def allowed(module: str) -> bool:
    return module in ELSEWHERE | NOT_YET


def test_every_module_has_a_unit_test_file_named_after_it():
    modules = sorted(str(p.relative_to(ROOT)) for package in ("pipeline", "methods") for p in (ROOT / package).rglob("*.py"))
    tests = {str(p.relative_to(ROOT)) for p in (ROOT / "tests/unit").rglob("test_*.py")}
    assert [m for m in untested(modules, tests) if not allowed(m)] == []


def test_allow_listed_modules_exist_and_still_lack_their_file():
    modules = {str(p.relative_to(ROOT)) for package in ("pipeline", "methods") for p in (ROOT / package).rglob("*.py")}
    tests = {str(p.relative_to(ROOT)) for p in (ROOT / "tests/unit").rglob("test_*.py")}
    listed = ELSEWHERE | NOT_YET
    assert listed <= modules  # a module that moved or went leaves the list
    assert [m for m in sorted(NOT_YET) if expected_test(m) in tests] == []  # got its file: off the list


def test_a_module_without_its_test_file_is_found():
    modules = ["pipeline/prepare/padding.py", "pipeline/sweep.py", "methods/_bert.py", "methods/kd.py", "pipeline/cli/__main__.py"]
    tests = {"tests/unit/prepare/test_padding.py", "tests/unit/methods/test_bert.py"}
    assert untested(modules, tests) == ["pipeline/sweep.py", "methods/kd.py"]
    assert expected_test("pipeline/search/trial_table.py") == "tests/unit/search/test_trial_table.py"
