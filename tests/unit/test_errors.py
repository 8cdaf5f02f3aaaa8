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


def test_a_uris_password_and_credential_parameters_never_reach_a_message():
    from pipeline.config import spec_from_dict
    from pipeline.errors import SpecError, redacted

    assert redacted("https://alice:s3cr3t@mlflow.example.com:5000/p?x=1&token=abc") == "https://alice:***@mlflow.example.com:5000/p?x=1&token=***"
    assert redacted("postgresql://u:p@db/x") == "postgresql://u:***@db/x"
    for plain in ("sqlite:////tmp/mlflow.db", "http://127.0.0.1:5000", "file:///a/b", "s3://bucket/prefix", "runs"):
        assert redacted(plain) == plain  # nothing to hide: as given
    try:
        spec_from_dict({"name": "s", "task": {"name": "synthetic", "source": "synthetic"}, "teacher": {"model": "random"},
                        "seeds": ["https://u:hunter2@host/x"]})
    except SpecError as e:
        assert "hunter2" not in str(e) and "https://u:***@host/x" in str(e), e.problems
    else:
        raise AssertionError("a URL is no seed")


def test_first_line_quotes_a_library_error_in_one_line_or_names_its_type():
    from pipeline.errors import first_line

    error = RuntimeError("  (sqlite3.OperationalError) attempt to write a readonly database\n[SQL: INSERT ...]\n")
    assert first_line(error) == "(sqlite3.OperationalError) attempt to write a readonly database"
    assert first_line(error, 12) == "(sqlite3.Ope"
    assert first_line(OSError()) == "OSError"
