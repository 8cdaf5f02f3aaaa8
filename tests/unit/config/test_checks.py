"""`drydock validate` checks the DeepSpeed preset a spec names: present, JSON, and of the spec's
ZeRO stage. Each mistake is a SpecError naming `resources.deepspeed.preset`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import load_deepspeed_preset, load_spec, spec_from_dict
from pipeline.errors import SpecError
from tests.unit.config.minimal import MINIMAL, problems

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
DEEPSPEED = ["resources.strategy=deepspeed", "resources.deepspeed.zero_stage=2"]


def preset_problem(path: Path, *overrides: str) -> str:
    spec = load_spec(SMOKE, [*DEEPSPEED, f"resources.deepspeed.preset={path}", *overrides])  # loading reads no file
    with pytest.raises(SpecError) as info:
        load_deepspeed_preset(spec)
    (problem,) = info.value.problems
    return problem


def test_a_missing_preset_is_named(tmp_path):
    assert preset_problem(tmp_path / "ds.json") == f"resources.deepspeed.preset: {tmp_path / 'ds.json'} is not a file (a DeepSpeed JSON config)"


def test_a_preset_that_is_not_json_or_not_an_object_is_named(tmp_path):
    (tmp_path / "bad.json").write_text("{zero_optimization: 2")
    assert preset_problem(tmp_path / "bad.json").startswith(f"resources.deepspeed.preset: {tmp_path / 'bad.json'} is not valid JSON (")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert preset_problem(tmp_path / "list.json") == (
        f"resources.deepspeed.preset: {tmp_path / 'list.json'} holds a JSON list, not an object (a DeepSpeed config)")


def test_a_preset_of_another_zero_stage_is_refused(tmp_path):
    (tmp_path / "zero1.json").write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    assert preset_problem(tmp_path / "zero1.json") == (
        f"resources.deepspeed.preset: {tmp_path / 'zero1.json'} sets ZeRO stage 1, but resources.deepspeed.zero_stage is 2")


def test_a_good_preset_is_read_relative_to_the_working_directory(tmp_path, monkeypatch):
    preset = {"zero_optimization": {"stage": 2, "overlap_comm": True}, "gradient_clipping": 1.0}
    (tmp_path / "zero2.json").write_text(json.dumps(preset))
    monkeypatch.chdir(tmp_path)
    spec = load_spec(SMOKE, [*DEEPSPEED, "resources.deepspeed.preset=zero2.json"])
    assert load_deepspeed_preset(spec) == preset
    # a preset without a stage takes the spec's; ddp never reads a preset
    (tmp_path / "plain.json").write_text("{}")
    assert load_deepspeed_preset(load_spec(SMOKE, [*DEEPSPEED, "resources.deepspeed.preset=plain.json"])) == {}
    ddp = load_spec(SMOKE, ["resources.strategy=ddp", "resources.deepspeed.preset=/nowhere.json"])
    assert load_deepspeed_preset(ddp) is None


def test_a_spec_validated_elsewhere_is_not_checked_against_this_machines_files():
    # a Train worker validates the spec's dump where it lands, maybe in another working directory
    # or on another node: the preset was read where drydock started, and travels with the trial
    raw = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"}, "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
           "resources": {"strategy": "deepspeed", "deepspeed": {"zero_stage": 2, "preset": "/nowhere/ds.json"}}}
    assert spec_from_dict(raw).resources.deepspeed.preset == "/nowhere/ds.json"


def test_drydock_validate_reports_the_preset_and_exits_2(tmp_path):
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", str(SMOKE), *[f"--set={o}" for o in DEEPSPEED],
                          f"--set=resources.deepspeed.preset={tmp_path / 'none.json'}"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert f"resources.deepspeed.preset: {tmp_path / 'none.json'} is not a file" in run.stderr + run.stdout
    assert "Traceback" not in run.stderr


def test_overlap_comm_is_refused_below_zero_stage_2(tmp_path):
    path = tmp_path / "overlap.json"
    path.write_text(json.dumps({"zero_optimization": {"overlap_comm": True}}))
    assert preset_problem(path, "resources.deepspeed.zero_stage=1") == (
        f"resources.deepspeed.preset: {path} sets overlap_comm, which drydock's accumulation supports only with "
        "ZeRO stage 2 (resources.deepspeed.zero_stage is 1)")
    spec = load_spec(SMOKE, [*DEEPSPEED, f"resources.deepspeed.preset={path}"])  # stage 2: fine
    assert load_deepspeed_preset(spec) == {"zero_optimization": {"overlap_comm": True}}


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
