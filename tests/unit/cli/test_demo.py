"""`make demo`'s command line: the quickstart spec, a work directory first, `--full` anywhere."""

from __future__ import annotations

from pipeline.cli.demo import FULL_SPEC, SPEC, demo_args


def test_the_demo_runs_the_quickstart_in_runs_by_default():
    assert demo_args([]) == ["sweep", SPEC, "--workdir", "runs"]


def test_a_work_directory_first_and_full_anywhere_with_other_options_passed_on():
    assert demo_args(["out", "--full", "--resume"]) == ["sweep", FULL_SPEC, "--workdir", "out", "--resume"]
    assert demo_args(["--resume"]) == ["sweep", SPEC, "--workdir", "runs", "--resume"]
