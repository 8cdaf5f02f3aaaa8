"""The spec: every shipped file validates; mistakes give one line naming the field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from pipeline.config import LatencyConfig, default_params, domain_candidates, domain_draw, load_spec, spec_from_dict, spec_to_dict
from pipeline.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "sweeps").glob("*.yaml"))

MINIMAL = {
    "name": "t",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "methods": {"kd": {"alpha": {"grid": [0.5, 0.9]}}},
}


def problems(raw: dict, overrides: list[str] | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(raw, overrides)
    return info.value.problems


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_shipped_spec_validates(path, monkeypatch):
    monkeypatch.setenv("GLUE_DIR", str(ROOT.parent / "shared" / "data" / "glue"))
    spec = load_spec(path)
    assert spec.name
    first = path.read_text().splitlines()[0]
    assert first.startswith("# drydock "), f"{path.name} must start with the command that runs it"


def test_minimal_spec_and_defaults():
    spec = spec_from_dict(MINIMAL)
    assert spec.seeds == [0] and spec.train.batch_size == 32
    assert spec.resources.strategy == "ddp" and spec.search.scheduler == "fifo"
    assert spec.registered_model_name == "t-student" and spec.experiment_name == "t"


def test_unknown_key_names_the_field():
    raw = {**MINIMAL, "train": {"epochs": 1, "epocs": 2}}
    assert problems(raw) == ["train.epocs: unknown key (not part of the spec); did you mean train.epochs?"]


def test_wrong_type_names_the_field_and_value():
    raw = {**MINIMAL, "train": {"batch_size": "big"}}
    (line,) = problems(raw)
    assert line.startswith("train.batch_size: ") and "'big'" in line


def test_negative_sequence_length():
    raw = {**MINIMAL, "task": {**MINIMAL["task"], "max_seq_length": -5}}
    (line,) = problems(raw)
    assert line.startswith("task.max_seq_length: ") and "greater than 0" in line and "-5" in line


def test_unset_environment_variable(monkeypatch):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    raw = {**MINIMAL, "task": {**MINIMAL["task"], "glue_dir": "${GLUE_DIR}"}}
    assert problems(raw) == ["task.glue_dir: environment variable GLUE_DIR is not set (used as ${GLUE_DIR})"]


def test_environment_expansion_and_default(monkeypatch):
    monkeypatch.setenv("GLUE_DIR", "/x/glue")
    raw = {**MINIMAL, "task": {**MINIMAL["task"], "glue_dir": "${GLUE_DIR}/sub"}}
    assert spec_from_dict(raw).task.glue_dir == "/x/glue/sub"
    monkeypatch.delenv("GLUE_DIR")
    raw["task"] = {"name": "sst2", "source": "auto", "glue_dir": "${GLUE_DIR:-}"}
    spec = spec_from_dict(raw)
    assert spec.task.glue_dir is None and spec.task.resolved_source() == "hub"


def test_overrides_with_set():
    spec = spec_from_dict(MINIMAL, ["train.epochs=1", "methods.kd.alpha=0.3", "seeds=[1, 2]"])
    assert spec.train.epochs == 1 and spec.methods["kd"]["alpha"] == 0.3 and spec.seeds == [1, 2]
    with pytest.raises(SpecError, match="expected KEY=VALUE"):
        spec_from_dict(MINIMAL, ["train.epochs"])


def test_method_parameters_are_checked_against_the_method():
    assert problems({**MINIMAL, "methods": {"kd": {"alpah": 0.5}}})[0].startswith("methods.kd.alpah: unknown parameter")
    (line,) = problems({**MINIMAL, "methods": {"kd": {"alpha": {"grid": [0.5, 1.5]}}}})
    assert line.startswith("methods.kd.alpha: ") and "1.5" in line
    assert problems({**MINIMAL, "methods": {"nope": {}}})[0].startswith("methods.nope: unknown method")
    (line,) = problems({**MINIMAL, "methods": {"kd": {"temperature": {"uniform": [5, 1]}}}})
    assert line == "methods.kd.temperature: uniform needs low < high, got [5, 1]"


def test_a_domain_is_checked_by_what_it_draws_not_only_its_bounds():
    kd = lambda **params: {**MINIMAL, "methods": {"kd": params}}
    # integer bounds, but uniform and loguniform draw floats: an integer parameter rejects them
    for kind in ("uniform", "loguniform"):
        assert problems(kd(num_layers={kind: [1, 3]})) == [
            f"methods.kd.num_layers: {kind} draws floats but num_layers takes integers; use randint or grid"
        ]
    assert spec_from_dict(kd(num_layers={"randint": [1, 3]}))
    assert spec_from_dict(kd(temperature={"uniform": [1, 3]}))
    # every grid and choice value is checked, not only the first
    (line,) = problems(kd(num_layers={"grid": [1, 2.5]}))
    assert line.startswith("methods.kd.num_layers: ") and "2.5" in line
    (line,) = problems(kd(init_from={"choice": ["finetuned", "scratch"]}))
    assert line.startswith("methods.kd.init_from: ") and "'scratch'" in line
    # any other type a draw does not fit is named with the draw that fails
    (line,) = problems({**MINIMAL, "methods": {"pkd": {"normalize": {"uniform": [0, 1]}}}})
    assert line.startswith("methods.pkd.normalize: uniform draws values inside the range that normalize rejects: ")


def test_validate_cli_rejects_a_float_range_on_an_integer_without_a_traceback(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(MINIMAL))
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", str(spec), "--set", "methods.kd.num_layers={uniform: [1, 3]}"],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == "error: methods.kd.num_layers: uniform draws floats but num_layers takes integers; use randint or grid"


def test_domains():
    assert domain_candidates({"grid": [1, 2]}) == [1, 2]
    assert domain_candidates({"loguniform": [1e-5, 1e-4]}) == [1e-5, 1e-4]
    assert domain_candidates({"randint": [2, 5]}) == [2, 4]
    draw = domain_draw({"uniform": [1, 3]})
    assert 1 < draw < 3 and not draw.is_integer()
    draw = domain_draw({"loguniform": [1, 100]})
    assert 1 < draw < 100 and not draw.is_integer()
    assert domain_draw({"randint": [2, 5]}) is None and domain_draw({"grid": [1.5]}) is None
    assert default_params({"alpha": {"grid": [0.1]}, "temperature": 3.0}) == {"temperature": 3.0}


def test_yaml_is_safe_loaded(tmp_path):
    bad = tmp_path / "evil.yaml"
    bad.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)


def test_validate_cli_exit_codes(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(MINIMAL))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**MINIMAL, "train": {"epocs": 1}}))
    run = lambda p: subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", str(p)], capture_output=True, text=True)
    ok = run(good)
    assert ok.returncode == 0, ok.stderr
    fail = run(bad)
    assert fail.returncode == 2
    assert fail.stderr.strip() == "error: train.epocs: unknown key (not part of the spec); did you mean train.epochs?"
    assert "Traceback" not in fail.stderr
    missing = run(tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "spec file not found" in missing.stderr


def test_bf16_takes_the_yaml_words_on_and_off(tmp_path):
    # PyYAML reads `on`/`off` as booleans; the field's own words must still work, in a file and
    # through --set, and a wrong word is still named
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(yaml.safe_dump(MINIMAL) + "train: {bf16: on}\n")
    assert load_spec(spec_file).train.bf16 == "on"
    assert spec_from_dict(MINIMAL, ["train.bf16=off"]).train.bf16 == "off"
    assert spec_from_dict(MINIMAL, ["train.bf16=true"]).train.bf16 == "on"
    assert spec_from_dict(MINIMAL, ["train.bf16=auto"]).train.bf16 == "auto"
    (line,) = problems(MINIMAL, ["train.bf16=always"])
    assert line.startswith("train.bf16: ") and "'always'" in line


def test_gpu_smoke_script_specs_validate():
    # the GPU checks run only where a GPU is lent; on every test run the script must parse, every
    # spec it would sweep must validate (presets included) and its Python checks must compile
    script = ROOT / "benchmarks" / "gpu_smoke.sh"
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    run = subprocess.run(["bash", str(script), "--check"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    checks = ["cuda", "ddp", "zero2", "theseus", "zero3", "export", "latency"]
    assert [line.split(":", 1)[0] for line in lines[:-1]] == [f"valid {check}" for check in checks], run.stdout
    assert lines[-1] == f"gpu_smoke --check: {len(checks)} valid, 0 invalid"
    sweeps = {line.split(":", 1)[0].split()[1]: line for line in lines if "(sweep 'gpu-" in line}
    assert set(sweeps) == {"ddp", "zero2", "theseus", "zero3"}
    assert "resources.workers_per_trial=2" in sweeps["ddp"] and "resources.strategy=ddp" in sweeps["ddp"]
    assert "zero_stage=2" in sweeps["zero2"] and "zero2-bf16.json" in sweeps["zero2"]
    assert "train.grad_accumulation=2" in sweeps["zero2"]
    assert "zero_stage=3" in sweeps["zero3"] and "zero3-bf16.json" in sweeps["zero3"]
    assert "methods: theseus" in sweeps["theseus"] and "schedule: constant" in sweeps["theseus"]


def fake_python(tmp_path: Path, body: str) -> str:
    """A PYTHON for gpu_smoke.sh --check that compiles nothing and prints `body`'s lines (a bash
    script) for the validating process, instead of importing drydock."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/bash\n[[ ${{3:-}} == validate ]] || exit 0\n{body}\n")
    fake.chmod(0o755)
    return str(fake)


def smoke_check(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_smoke.sh"), "--check"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": fake_python(tmp_path, body)})


def said(*checks: str) -> str:
    return "\n".join(f"printf 'OK\\t{check}\\tsweeps/smoke.yaml: valid (sweep gpu-{check})\\n'" for check in checks)


def test_gpu_smoke_check_fails_for_a_check_the_validating_process_never_printed(tmp_path):
    # all four lines: valid (the fake's lines stand in for drydock validate's)
    run = smoke_check(tmp_path, said("ddp", "zero2", "theseus", "zero3"))
    assert run.returncode == 0 and run.stdout.splitlines()[-1] == "gpu_smoke --check: 7 valid, 0 invalid", run.stdout
    # theseus's line missing (a line for a check not asked for, or a second one, stands for none)
    run = smoke_check(tmp_path, said("ddp", "zero2", "zero3", "zero2", "bogus") + "\necho 'Killed' >&2\nexit 137")
    lines = run.stdout.splitlines()
    assert run.returncode != 0 and lines[-1] == "gpu_smoke --check: 6 valid, 1 invalid", run.stdout
    assert [line.split(":", 1)[0] for line in lines[:-1]] == [
        "valid cuda", "valid ddp", "valid zero2", "invalid theseus", "valid zero3", "valid export", "valid latency"]
    assert lines[3] == "invalid theseus: the validating process printed no line for it (exit 137; last output: Killed)"
    # it printed nothing at all: every sweep check is invalid, none just uncounted
    run = smoke_check(tmp_path, "exit 1")
    assert run.returncode != 0 and run.stdout.splitlines()[-1] == "gpu_smoke --check: 3 valid, 4 invalid", run.stdout
    assert "invalid ddp: the validating process printed no line for it (exit 1)" in run.stdout


def latency_of(latency: dict) -> LatencyConfig:
    return spec_from_dict({**MINIMAL, "selection": {"latency": latency}}).selection.latency


def test_a_spec_that_lists_shapes_and_names_no_front_gets_the_front_it_expects():
    # the only shape listed is the front: nothing else is timed
    latency = latency_of({"shapes": ["1x128"]})
    assert [s.label for s in latency.shapes] == ["1x128"] and latency.front_shape.label == "1x128"
    assert (latency.batch_size, latency.seq_length) == (1, 128)
    # several: 32x64, the default front, when listed
    latency = latency_of({"shapes": ["1x128", "8x128", "32x64"]})
    assert [s.label for s in latency.shapes] == ["1x128", "8x128", "32x64"] and latency.front_shape.label == "32x64"
    # several without it: which one the budget means is the user's to say
    assert problems({**MINIMAL, "selection": {"latency": {"shapes": ["1x128", "8x128"]}}}) == [
        "selection.latency: shapes lists 1x128, 8x128 and no front_shape: set selection.latency.front_shape to the one "
        "of them the variants' front and the latency budget use"]
    assert latency_of({"shapes": ["1x128", "8x128"], "front_shape": "8x128"}).seq_length == 128
    # a shape listed twice is still said so, not taken for two
    assert problems({**MINIMAL, "selection": {"latency": {"shapes": ["1x128", "1x128"]}}}) == [
        "selection.latency.shapes: 1x128 is listed twice"]


def test_batch_size_and_seq_length_keep_their_front_beside_listed_shapes():
    # a spec from before `shapes` (or one that names its front by the fields) keeps its front exactly
    latency = latency_of({"batch_size": 8, "seq_length": 32, "shapes": ["1x128"]})
    assert latency.front_shape.label == "8x32" and [s.label for s in latency.shapes] == ["1x128", "8x32"]
    latency = latency_of({"seq_length": 128, "shapes": ["1x128"]})  # batch_size at its default
    assert latency.front_shape.label == "32x128" and [s.label for s in latency.shapes] == ["1x128", "32x128"]
    assert latency_of({}) == LatencyConfig() and LatencyConfig().front_shape.label == "32x64"
    # a run's spec.json names all three: read back the same
    spec = spec_from_dict({**MINIMAL, "selection": {"latency": {"shapes": ["1x128"]}}})
    assert spec_from_dict(spec_to_dict(spec)) == spec


def test_a_copy_cannot_make_the_fronts_names_disagree():
    latency = LatencyConfig()
    moved = latency.model_copy(update={"front_shape": "1x128"})
    assert (moved.front_shape.label, moved.batch_size, moved.seq_length) == ("1x128", 1, 128)
    moved = latency.model_copy(update={"batch_size": 1, "seq_length": 128})
    assert moved.front_shape.label == "1x128" and [s.label for s in moved.shapes] == ["1x128", "32x64"]
    moved = latency.model_copy(update={"seq_length": 32})
    assert moved.front_shape.label == "32x32" and [s.label for s in moved.shapes] == ["1x128", "32x64", "32x32"]
    with pytest.raises(ValidationError, match="is not one of selection.latency.shapes"):
        latency.model_copy(update={"shapes": ["1x128"]})
    plain = latency.model_copy(update={"accelerator_type": "A100"})  # any other field: a plain copy
    assert plain.accelerator_type == "A100" and plain.front_shape == latency.front_shape


def test_only_true_and_false_are_yaml_booleans():
    # YAML 1.2 booleans; bool fields still take on/off/yes/no through pydantic
    cofi = {**MINIMAL, "methods": {"cofi": {"layer_order_constraint": {"grid": ["on", "off"]}}}}
    spec = spec_from_dict(cofi, ["methods.cofi.layer_order_constraint={grid: [on, off]}", "train.progress_bar=off"])
    assert domain_candidates(spec.methods["cofi"]["layer_order_constraint"]) == ["on", "off"]
    assert spec.train.progress_bar is False
    assert spec_from_dict(MINIMAL, ["train.progress_bar=yes"]).train.progress_bar is True


def test_teacher_placement_follows_the_trials_onto_gpus():
    where = lambda *sets: spec_from_dict(MINIMAL, list(sets)).resources.teacher_on_workers()
    assert where() is False  # CPU trials: the driver fine-tunes it (no Train start-up to pay)
    assert where("resources.use_gpu=true") is True  # the driver's node may have no GPU
    assert where("resources.use_gpu=true", "resources.teacher_placement=driver") is False
    assert where("resources.teacher_placement=workers") is True


def test_keep_checkpoints_is_a_positive_count_named_in_the_error():
    assert spec_from_dict(MINIMAL).train.keep_checkpoints == 1  # the latest carries the best's state too
    assert spec_from_dict(MINIMAL, ["train.keep_checkpoints=3"]).train.keep_checkpoints == 3
    assert problems({**MINIMAL, "train": {"keep_checkpoints": 0}}) == ["train.keep_checkpoints: Input should be greater than 0 (got 0)"]
    (line,) = problems(MINIMAL, ["train.keep_checkpoints=two"])
    assert line.startswith("train.keep_checkpoints: ") and "'two'" in line


def test_zero_3_is_refused_only_for_methods_whose_ranks_run_different_modules():
    """ZeRO-3 gathers each module's weights with a collective as the module runs: Theseus' and
    CoFi's ranks run different modules in one step and would wait for each other forever (CoFi
    hung so on two gloo ranks). kd, MiniLM and the rest run under ZeRO-3; one worker has no peer."""
    raw = {**MINIMAL, "methods": {"kd": {}, "minilm": {}, "theseus": {}, "cofi": {}}}
    zero_3 = ["resources.strategy=deepspeed", "resources.deepspeed.zero_stage=3"]
    found = problems(raw, [*zero_3, "resources.workers_per_trial=2"])
    assert [p.split(":")[0] for p in found] == ["methods.theseus", "methods.cofi"]
    assert "cannot train under resources.deepspeed.zero_stage 3 with 2 workers" in found[0]
    assert spec_from_dict(raw, [*zero_3, "resources.workers_per_trial=1"]).resources.deepspeed.zero_stage == 3
    assert spec_from_dict(raw, ["resources.strategy=deepspeed", "resources.deepspeed.zero_stage=2",
                                "resources.workers_per_trial=2"]).resources.deepspeed.zero_stage == 2
