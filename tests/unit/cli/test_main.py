"""`drydock train --output DIR` never mixes two students (issue 21: a stale `_pruned_bert.py` stayed
beside a new export): a folder that is not empty is refused, exit 2, before any work, unless
`--replace` is given, which empties it first."""

from __future__ import annotations

import json

import yaml

from pipeline.cli.main import main

SPEC = {
    "name": "out", "task": {"name": "synthetic", "source": "synthetic", "max_seq_length": 16,
             "synthetic": {"num_train": 64, "num_dev": 32}},
    "teacher": {"model": "random", "architecture": {"num_layers": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64},
                "tokenizer": {"vocab_size": 64}},
    "student": {"num_layers": 1},
    "train": {"epochs": 1, "batch_size": 32, "progress_bar": False},
    "methods": {"finetune": {}},
}


def stale_output(tmp_path):
    out = tmp_path / "out"
    (out / "student").mkdir(parents=True)
    (out / "student" / "_pruned_bert.py").write_text("# an earlier CoFi export's code\n")
    (out / "metrics.json").write_text("{}")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    return spec, out


def test_a_folder_that_is_not_empty_is_refused_before_any_work(tmp_path, capsys):
    spec, out = stale_output(tmp_path)
    code = main(["train", str(spec), "--method", "finetune", "--output", str(out), "--workdir", str(tmp_path / "work")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: --output: {out} is not empty") and "--replace" in err[0]
    assert (out / "student" / "_pruned_bert.py").is_file() and (out / "metrics.json").read_text() == "{}"
    assert not (tmp_path / "work").exists()  # nothing prepared


def test_replace_never_empties_a_folder_that_holds_the_spec_or_the_work_directory(tmp_path, capsys):
    spec, out = stale_output(tmp_path)
    code = main(["train", str(spec), "--method", "finetune", "--output", str(tmp_path), "--replace",
                 "--workdir", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert code == 2 and "--replace would delete" in err
    assert spec.is_file() and (out / "student" / "_pruned_bert.py").is_file()


def test_replace_empties_the_folder_first(tmp_path, capsys):
    spec, out = stale_output(tmp_path)
    code = main(["train", str(spec), "--method", "finetune", "--output", str(out), "--replace", "--workdir", str(tmp_path / "work")])
    assert code == 0, capsys.readouterr().err
    assert not (out / "student" / "_pruned_bert.py").exists()
    assert (out / "student" / "config.json").is_file() and json.loads((out / "metrics.json").read_text())["method"] == "finetune"
