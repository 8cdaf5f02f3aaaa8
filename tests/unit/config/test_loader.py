"""Loading a spec: every shipped file validates; YAML is read safely with YAML 1.2 booleans;
`${VAR}` expansion and `--set` overrides; `drydock validate`'s exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.config import domain_candidates, load_spec, spec_from_dict
from pipeline.errors import SpecError
from tests.unit.config.minimal import MINIMAL, problems

ROOT = Path(__file__).resolve().parents[3]
SPECS = sorted((ROOT / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_shipped_spec_validates(path, monkeypatch):
    monkeypatch.setenv("GLUE_DIR", str(ROOT.parent / "shared" / "data" / "glue"))
    spec = load_spec(path)
    assert spec.name
    first = path.read_text().splitlines()[0]
    assert first.startswith("# drydock "), f"{path.name} must start with the command that runs it"


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


def test_only_true_and_false_are_yaml_booleans():
    # YAML 1.2 booleans; bool fields still take on/off/yes/no through pydantic
    cofi = {**MINIMAL, "methods": {"cofi": {"layer_order_constraint": {"grid": ["on", "off"]}}}}
    spec = spec_from_dict(cofi, ["methods.cofi.layer_order_constraint={grid: [on, off]}", "train.progress_bar=off"])
    assert domain_candidates(spec.methods["cofi"]["layer_order_constraint"]) == ["on", "off"]
    assert spec.train.progress_bar is False
    assert spec_from_dict(MINIMAL, ["train.progress_bar=yes"]).train.progress_bar is True


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
    checks = ["cuda", "ddp", "zero2", "theseus", "zero3", "actor", "export", "latency"]
    assert [line.split(":", 1)[0] for line in lines[:-1]] == [f"valid {check}" for check in checks], run.stdout
    assert lines[-1] == f"gpu_smoke --check: {len(checks)} valid, 0 invalid"
    sweeps = {line.split(":", 1)[0].split()[1]: line for line in lines if "(sweep 'gpu-" in line}
    assert set(sweeps) == {"actor", "ddp", "zero2", "theseus", "zero3"}
    assert "resources.trial_runner=tune-actor" in sweeps["actor"] and "resources.workers_per_trial=1" in sweeps["actor"]
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
    # all five lines: valid (the fake's lines stand in for drydock validate's)
    run = smoke_check(tmp_path, said("actor", "ddp", "zero2", "theseus", "zero3"))
    assert run.returncode == 0 and run.stdout.splitlines()[-1] == "gpu_smoke --check: 8 valid, 0 invalid", run.stdout
    # theseus's line missing (a line for a check not asked for, or a second one, stands for none)
    run = smoke_check(tmp_path, said("actor", "ddp", "zero2", "zero3", "zero2", "bogus") + "\necho 'Killed' >&2\nexit 137")
    lines = run.stdout.splitlines()
    assert run.returncode != 0 and lines[-1] == "gpu_smoke --check: 7 valid, 1 invalid", run.stdout
    assert [line.split(":", 1)[0] for line in lines[:-1]] == [
        "valid cuda", "valid ddp", "valid zero2", "invalid theseus", "valid zero3", "valid actor", "valid export",
        "valid latency"]
    assert lines[3] == "invalid theseus: the validating process printed no line for it (exit 137; last output: Killed)"
    # it printed nothing at all: every sweep check is invalid, none just uncounted
    run = smoke_check(tmp_path, "exit 1")
    assert run.returncode != 0 and run.stdout.splitlines()[-1] == "gpu_smoke --check: 3 valid, 5 invalid", run.stdout
    assert "invalid ddp: the validating process printed no line for it (exit 1)" in run.stdout


def test_gpu_smoke_only_runs_the_sweep_checks_named(tmp_path):
    # a rerun inside a lease's last minutes: GPU_SMOKE_ONLY names the sweep checks to run again;
    # the others are reported SKIP and never start a sweep (a fake python stands in for drydock and
    # the checks' helper, and writes down every sweep it is asked to run)
    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text("#!/bin/bash\n"
                    f"[[ $1 == -m ]] && {{ echo \"$*\" >> {calls}; exit 0; }}\n"
                    "case ${3:-} in cuda) echo 1; echo 'PASS one fake GPU' ;; sweep) echo \"PASS ran $4\" ;;"
                    " *) echo 'PASS fake' ;; esac\n")
    fake.chmod(0o755)
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_smoke.sh"), str(tmp_path / "work")],
                         capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "GPU_SMOKE_ONLY": "zero3"})
    lines = run.stdout.splitlines()
    assert lines[:6] == ["PASS cuda: one fake GPU", "SKIP ddp: not in GPU_SMOKE_ONLY=zero3",
                         "SKIP zero2: not in GPU_SMOKE_ONLY=zero3", "SKIP theseus: not in GPU_SMOKE_ONLY=zero3",
                         "PASS zero3: ran zero3", "SKIP actor: not in GPU_SMOKE_ONLY=zero3"], run.stdout + run.stderr
    assert lines[-1] == "gpu_smoke: 4 passed, 0 failed, 4 skipped" and run.returncode == 0
    sweeps = calls.read_text().splitlines()
    assert len(sweeps) == 1 and "name=gpu-zero3" in sweeps[0] and "zero_stage=3" in sweeps[0]
    # a misspelt name is refused before anything runs, rather than skipping every sweep and passing
    calls.unlink()
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_smoke.sh"), str(tmp_path / "work")],
                         capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "GPU_SMOKE_ONLY": "zero3 zero-2"})
    assert run.returncode == 2 and run.stdout == "" and not calls.exists()
    assert run.stderr.strip() == "gpu_smoke: GPU_SMOKE_ONLY: 'zero-2' is not a sweep check (ddp, zero2, theseus, zero3, actor)"


def test_gpu_smoke_names_the_last_real_progress_line_of_a_sweep_that_timed_out(tmp_path):
    # the H200's first zero2 sweep timed out and its line said "last progress: search:" (the head
    # of the line printed as it was being stopped); the step it was stuck at is the line to name
    script = (ROOT / "benchmarks" / "gpu_smoke.sh").read_text()
    helper = script.split("read -r -d '' HELPER <<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    log = tmp_path / "zero2.log"
    log.write_text("prepare: 256 training examples\nteacher: step 16: accuracy 0.4453\n"
                   "search: 0 done, 1 running, 0 pending (trial kd-02da6791-s0 started)\n"
                   "trial kd-02da6791-s0: started 10s ago, no evaluation yet\n"
                   "search: still working (15s since its last line)\n"
                   "search: SIGTERM received: stopping the running trials (they rerun on --resume)\n"
                   "search: still working (15s since its last line)\n")
    run = subprocess.run([sys.executable, "-c", helper, "sweep", "zero2", str(tmp_path), "0", "137", str(log),
                          "180", "200", "deepspeed", "1"], capture_output=True, text=True, cwd=ROOT)
    assert run.stdout.strip() == ("FAIL timed out after 180s; last progress: trial kd-02da6791-s0: started 10s ago,"
                                  f" no evaluation yet (exit 137, 200s; log {log})"), run.stdout + run.stderr
