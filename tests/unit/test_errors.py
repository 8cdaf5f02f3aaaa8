"""A user mistake carries its problems one per line, whichever kind of mistake it is."""

from __future__ import annotations

from pipeline.errors import DataError, DrydockError, SpecError


def test_one_problem_or_many_each_on_its_own_line():
    one = DrydockError("train.csv: missing column 'label'")
    many = SpecError(["train.epochs: must be > 0", "seeds: empty"])
    assert one.problems == ["train.csv: missing column 'label'"] and str(one) == "train.csv: missing column 'label'"
    assert many.problems == ["train.epochs: must be > 0", "seeds: empty"]
    assert str(many) == "train.epochs: must be > 0\nseeds: empty"


def test_spec_and_data_errors_are_user_mistakes_the_cli_prints_without_a_traceback():
    assert issubclass(SpecError, DrydockError) and issubclass(DataError, DrydockError)
    assert not issubclass(DataError, SpecError)
    assert DataError(("a", "b")).problems == ["a", "b"]  # any sequence of lines
