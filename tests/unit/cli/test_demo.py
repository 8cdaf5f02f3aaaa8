"""`make demo`'s command line: the quickstart spec, a work directory first, `--full` anywhere."""

from __future__ import annotations

from pipeline.cli.demo import FULL_SPEC, SPEC, demo_args


def test_the_demo_runs_the_quickstart_in_runs_by_default():
    assert demo_args([]) == ["sweep", SPEC, "--workdir", "runs"]


def test_a_work_directory_first_and_full_anywhere_with_other_options_passed_on():
    assert demo_args(["out", "--full", "--resume"]) == ["sweep", FULL_SPEC, "--workdir", "out", "--resume"]
    assert demo_args(["--resume"]) == ["sweep", SPEC, "--workdir", "runs", "--resume"]


def test_the_picture_step_replaces_only_the_readme_block_between_its_markers():
    import pytest

    from pipeline.cli.demo import FRONT_BEGIN, FRONT_END, put_in_readme

    readme = f"# drydock\n\nbefore\n{FRONT_BEGIN}\n\n```text\nold table\n```\n\n{FRONT_END}\nafter\n"
    out = put_in_readme(readme, "new front\nnew runtimes\n")
    assert out == f"# drydock\n\nbefore\n{FRONT_BEGIN}\n\n```text\nnew front\nnew runtimes\n```\n\n{FRONT_END}\nafter\n"
    assert put_in_readme(out, "new front\nnew runtimes\n") == out  # again: the same README
    with pytest.raises(SystemExit, match="no block between"):
        put_in_readme("# drydock\n", "x")
