"""A typo's error names the fix (issue 23, item 5): unknown spec keys, method names, method
parameters and GLUE task names get "did you mean …?", and `drydock --version` says which
drydock is installed."""

from __future__ import annotations

from importlib.metadata import version

import pytest
import yaml

from pipeline.cli.main import main
from pipeline.config import did_you_mean, spec_from_dict
from pipeline.errors import SpecError

MINIMAL = {
    "name": "t",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "methods": {"kd": {}},
}


def problems(raw: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(raw)
    return info.value.problems


def test_an_unknown_key_names_the_key_meant():
    assert problems({**MINIMAL, "train": {"epoch": 2}}) == ["train.epoch: unknown key (not part of the spec); did you mean train.epochs?"]
    assert problems({**MINIMAL, "seed": [0]}) == ["seed: unknown key (not part of the spec); did you mean seeds?"]
    # inside an optional section (`FilesSource | None`) and two levels down
    files = {"name": "x", "source": "files", "files": {"trian": "a.csv", "train": "a.csv", "dev": "b.csv"}, "text_columns": ["t"],
             "num_labels": 2}
    assert problems({**MINIMAL, "task": files}) == ["task.files.trian: unknown key (not part of the spec); did you mean task.files.train?"]
    assert problems({**MINIMAL, "selection": {"latency": {"seq_len": 64}}}) == [
        "selection.latency.seq_len: unknown key (not part of the spec); did you mean selection.latency.seq_length?"]


def test_an_unknown_key_with_nothing_close_keeps_the_plain_message():
    assert problems({**MINIMAL, "train": {"zzz": 1}}) == ["train.zzz: unknown key (not part of the spec; check the spelling)"]


def test_an_unknown_method_or_parameter_names_the_one_meant():
    (line,) = problems({**MINIMAL, "methods": {"kdd": {}}})
    assert line.startswith("methods.kdd: unknown method (registered: ") and line.endswith("; did you mean kd?")
    (line,) = problems({**MINIMAL, "methods": {"kd": {"alpah": 0.5}}})
    assert line.startswith("methods.kd.alpah: unknown parameter (known: ") and line.endswith("; did you mean alpha?")


def test_a_misspelt_glue_task_names_the_glue_task():
    (line,) = problems({**MINIMAL, "task": {"name": "sst", "source": "glue_dir", "glue_dir": "/data/glue"}})
    assert line.startswith("task: ") and "sst" in line and line.endswith("; did you mean sst2?")
    (line,) = problems({**MINIMAL, "task": {"name": "MRCP", "source": "hub"}})
    assert line.startswith("task: ") and "mrcp" in line and line.endswith("; did you mean mrpc?")


def test_a_custom_task_far_from_any_glue_name_gets_no_guess():
    (line,) = problems({**MINIMAL, "task": {"name": "sentiment-reviews", "source": "hub"}})
    assert "did you mean" not in line


def test_did_you_mean():
    assert did_you_mean("epoch", ["epochs", "batch_size"], "train.") == "; did you mean train.epochs?"
    assert did_you_mean("qqq", ["epochs"]) == ""


def test_train_with_an_unknown_method_names_the_one_meant(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(MINIMAL))
    code = main(["train", str(spec), "--method", "theseuss", "--output", str(tmp_path / "out")])
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err.startswith("error: --method: unknown method 'theseuss'") and err.endswith("; did you mean theseus?")


def test_validate_exits_2_with_the_hint(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**MINIMAL, "train": {"epoch": 2}}))
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr().err == "error: train.epoch: unknown key (not part of the spec); did you mean train.epochs?\n"


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"drydock {version('drydock')}\n"
