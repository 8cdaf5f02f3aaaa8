"""The probe set of issue 37 as a table: bad specs, bad files, bad work locations and tampered
students, each run as a user runs it (the `drydock` command in its own process). Every probe
must end in exit 2 with one `error:` line naming the field or file, no traceback, and before any
work (no Ray, no teacher): each row once passed, ran code, or failed late in a traceback.

Probes that need more than one command live beside their subject: Ctrl-C and SIGTERM during a
search (tests/integration/search/test_interrupt.py, slow tier), kills and resumes
(tests/integration/search/test_sweep_resume.py, slow), a read-only `mlflow.db`
(tests/integration/cli/test_read_only_store.py), a copied work directory
(tests/unit/test_tracking.py), `${VAR}` secrets (tests/unit/config/test_loader.py) and swapped
ONNX graphs (tests/integration/select/test_onnx_champion.py)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
# a random 4-layer teacher on the synthetic task: everything a probe does not change
BASE = {
    "name": "probe",
    "task": {"name": "synthetic", "source": "synthetic", "synthetic": {"num_train": 64, "num_dev": 16}, "max_seq_length": 32},
    "teacher": {"model": "random", "architecture": {"num_layers": 4, "hidden_size": 32, "num_heads": 4, "intermediate_size": 64},
                "tokenizer": {"vocab_size": 100}},
    "student": {"num_layers": 2},
    "methods": {"kd": {"alpha": 0.5}},
}
ZEN = "Beautiful is better than ugly"  # what importing the module `this` prints


@dataclass(frozen=True)
class Probe:
    name: str
    issue_item: int
    # writes what the probe needs under the folder it is given; returns the command's arguments
    setup: Callable[[Path], list[str]]
    expected: str  # a regular expression the `error:` line matches from its start
    forbidden: tuple[str, ...] = ()  # output that shows the probe ran something it must not


def write_spec(folder: Path, spec: dict, **changes: object) -> Path:
    spec = copy.deepcopy(spec)
    for dotted, value in changes.items():
        node = spec
        *parents, last = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def validate(**changes: object) -> Callable[[Path], list[str]]:
    return lambda folder: ["validate", str(write_spec(folder, BASE, **changes))]


def validate_teacher(model: str) -> Callable[[Path], list[str]]:
    return lambda folder: ["validate", str(write_spec(folder, {**BASE, "teacher": {"model": model}}))]


def sweep(spec_of: Callable[[Path], dict], workdir: str | None = None) -> Callable[[Path], list[str]]:
    def setup(folder: Path) -> list[str]:
        return ["sweep", str(write_spec(folder, spec_of(folder))), "--workdir", workdir or str(folder / "work")]
    return setup


def huge_spec(folder: Path) -> list[str]:
    path = write_spec(folder, BASE)
    path.write_bytes(path.read_bytes() + b"# " + b"x" * 10_000_000 + b"\n")
    return ["validate", str(path)]


def duplicate_key(folder: Path) -> list[str]:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(BASE) + "student:\n  num_layers: 3\n")
    return ["validate", str(path)]


def teacher_folder(folder: Path, *, custom_code: bool = False, pickle_only: bool = False) -> Path:
    import torch

    from tests.conftest import make_tiny_bert

    teacher = folder / "teacher"
    model = make_tiny_bert()
    model.save_pretrained(teacher)
    if pickle_only:
        (teacher / "model.safetensors").unlink()
        torch.save(model.state_dict(), teacher / "pytorch_model.bin")
    if custom_code:
        (teacher / "evil.py").write_text(f"open({str(folder / 'ran')!r}, 'w').write('ran')\n")
        config = json.loads((teacher / "config.json").read_text())
        config.update(model_type="evil", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForSequenceClassification": "evil.Evil"})
        (teacher / "config.json").write_text(json.dumps(config))
    return teacher


def with_teacher(**kind: bool) -> Callable[[Path], list[str]]:
    def setup(folder: Path) -> list[str]:
        spec = {**BASE, "teacher": {"model": str(teacher_folder(folder, **kind))}}
        return ["validate", str(write_spec(folder, spec))]
    return setup


def csv_task(train_text: str) -> Callable[[Path], dict]:
    def spec_of(folder: Path) -> dict:
        train, dev = folder / "train.csv", folder / "dev.csv"
        train.write_text(train_text)
        dev.write_text("question,answer,verdict\nis it good?,yes,yes\nis it bad?,no,no\n")
        return {**BASE, "task": {"name": "qa", "source": "files", "files": {"train": str(train), "dev": str(dev)},
                                 "text_columns": ["question", "answer"], "label_column": "verdict", "label_names": ["no", "yes"],
                                 "max_seq_length": 32}}
    return spec_of


def stsb_with_a_score(score: str) -> Callable[[Path], dict]:
    def spec_of(folder: Path) -> dict:
        from tests.unit.prepare.task_files import GLUE_CASES, write_glue_task

        files = dict(GLUE_CASES["stsb"][0])
        files["dev.tsv"] = files["dev.tsv"].replace("\t0.000", f"\t{score}")
        write_glue_task(folder, "stsb", files)
        return {**BASE, "task": {"name": "stsb", "source": "glue_dir", "glue_dir": str(folder), "max_seq_length": 32}}
    return spec_of


def corrupt_results(folder: Path) -> list[str]:
    run = folder / "work" / "probe"
    run.mkdir(parents=True)
    (run / "results.parquet").write_bytes(b"PAR1 this is not a parquet file")
    return ["report", str(run)]


def swapped_weights(folder: Path) -> list[str]:
    from safetensors.torch import load_file, save_file

    from pipeline.prepare.text_tokenizer import train_wordpiece
    from tests.conftest import TINY_TEXTS
    from tests.unit.prepare.test_model_card import stock_export

    student, _ = stock_export(folder / "student", train_wordpiece(TINY_TEXTS * 4, vocab_size=100))
    weights = load_file(student / "model.safetensors")
    save_file({name: t + 0.01 for name, t in weights.items()}, student / "model.safetensors", metadata={"format": "pt"})
    return ["eval", str(student), str(write_spec(folder, BASE)), "--workdir", str(folder / "work")]


PROBES = [
    Probe("a pkg: teacher whose module runs code", 7, validate_teacher("pkg:this.x/model"),
          r"teacher\.model: package 'this\.x' of 'pkg:this\.x/model' is not installed", forbidden=(ZEN,)),
    Probe("a pkg: teacher of a package not installed", 7, validate_teacher("pkg:drydock_no_such_package/model"),
          r"teacher\.model: .*drydock_no_such_package"),
    Probe("checkpoints on ftp://", 7, validate(resources__storage_path="ftp://host/checkpoints"),
          r"resources\.storage_path: cannot open ftp://host/checkpoints"),
    Probe("a 10 MB spec", 9, huge_spec, r".*spec\.yaml: larger than a spec may be \(262,144 bytes at most"),
    Probe("a key given twice", 9, duplicate_key, r".*spec\.yaml line \d+: not valid YAML \(duplicate key 'student' \(first on line \d+"),
    Probe("a teacher that ships its own code", 1, with_teacher(custom_code=True), r"teacher\.model: .*custom code"),
    Probe("a teacher with pickle weights only", 8, with_teacher(pickle_only=True), r"teacher\.model: .*pickle \(pytorch_model\.bin\)"),
    Probe("--workdir s3:// with no bucket", 7, sweep(lambda folder: BASE, "s3://"), r"--workdir: s3:// names no bucket"),
    Probe("a work directory that takes no files", 8, sweep(lambda folder: BASE, "/proc"), r"--workdir: cannot write to /proc"),
    Probe("retrain into a work directory that takes no files", 8,
          lambda folder: ["retrain", str(write_spec(folder, BASE)), "--workdir", "/proc"], r"--workdir: cannot write to /proc"),
    Probe("a csv header naming a column twice", 3, sweep(csv_task("verdict,question,answer,verdict\nyes,q?,a,no\nno,q2?,b,yes\n")),
          r".*train\.csv: line 1: the header names verdict twice"),
    Probe("a csv quote left open", 3, sweep(csv_task('verdict,question,answer\nyes,is it good?,yes\nno,"is it bad?,no\nyes,fine",yes\n')),
          r".*train\.csv: line 3: a quoted text runs on to line 4"),
    Probe("a regression score of 1e308", 3, sweep(stsb_with_a_score("1e308")), r".*STS-B/dev\.tsv: line 2: label '1e308' is beyond"),
    Probe("a corrupt results.parquet under drydock report", 8, corrupt_results, r".*results\.parquet: cannot be read as a results table"),
    Probe("a student whose weights were swapped", 5, swapped_weights, r".*model\.safetensors: .*not the exported ones"),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_a_probe_ends_in_one_line_and_exit_2_before_any_work(probe: Probe, tmp_path: Path):
    args = probe.setup(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    output = proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2, output[-3000:]
    assert len(errors) == 1 and re.match(probe.expected, errors[0][len("error: "):]), output[-3000:]
    assert "Traceback" not in output and "teacher: fine-tuning" not in output  # no teacher stage began
    for text in probe.forbidden:
        assert text not in output
    assert not (tmp_path / "ran").exists()  # a teacher's own code never ran
    assert not (tmp_path / "work" / "cache").exists() or probe.name.startswith("a student")  # stopped before the data stage's output
