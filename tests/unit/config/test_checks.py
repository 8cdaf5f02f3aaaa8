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


# ----------------------------------------------------------------------------------------------
# search.algorithm: what each algorithm can serve, one line naming the field
# ----------------------------------------------------------------------------------------------

def _searching(algorithm: str, methods: dict | None = None, **search) -> dict:
    from tests.unit.config.minimal import MINIMAL

    return {**MINIMAL, "methods": methods or {"kd": {"num_layers": {"randint": [1, 5]}, "alpha": {"uniform": [0.1, 0.9]}}},
            "search": {"algorithm": algorithm, **search}}


@pytest.mark.parametrize("algorithm,search,expected", [
    ("tpe", {"num_configurations": 10, "objectives": ["metric", "latency"]},
     "search.objectives: tpe optimises one objective, the task metric; use motpe or nsga2 for metric and latency together"),
    ("motpe", {"num_configurations": 10, "objectives": ["metric"]},
     "search.objectives: motpe searches the metric and latency together; use tpe for the metric alone"),
    ("tpe", {}, "search.num_configurations: algorithm tpe asks for one configuration at a time and needs a budget: "
                "how many configurations in all (each runs once per seed)"),
    ("random", {"num_configurations": 4, "num_samples": 3},
     "search.num_samples: counts draws per grid point of algorithm grid; algorithm random is budgeted by search.num_configurations"),
    ("random", {"num_configurations": 4, "objectives": []}, "search.objectives: List should have at least 1 item after validation, not 0"),
    ("grid", {"time_budget": "1h"}, "search.time_budget: the grid runs every configuration of its fixed list; a time "
                                     "budget needs a searching algorithm (random, tpe, motpe or nsga2)"),
    ("grid", {"objectives": ["metric"]}, "search.objectives: the grid runs every configuration and aims at nothing; "
                                          "set search.algorithm to random, tpe, motpe or nsga2 to search for them"),
])
def test_an_algorithm_that_cannot_serve_what_is_asked_is_refused_in_one_line(algorithm, search, expected):
    from tests.unit.config.minimal import problems

    assert problems(_searching(algorithm, **search)) == [expected]


def test_a_grid_capped_below_its_size_and_a_budget_beyond_a_finite_space_are_refused():
    from pipeline.config import spec_from_dict
    from tests.unit.config.minimal import MINIMAL, problems

    assert problems({**MINIMAL, "search": {"num_configurations": 1}}) == [
        "search.num_configurations: 1 is smaller than the grid's 2 configurations; a grid runs all of them: drop the field, "
        "shrink the grid, or search with algorithm random, tpe, motpe or nsga2"]
    assert spec_from_dict({**MINIMAL, "search": {"num_configurations": 2}}).search.num_configurations == 2
    finite = {"kd": {"num_layers": {"randint": [1, 4]}}, "theseus": {"num_layers": {"choice": [2, 3]}}}  # 3 + 2
    assert problems(_searching("tpe", finite, num_configurations=6)) == [
        "search.num_configurations: 6 configurations asked, but the methods' domains hold only 5 distinct ones; "
        "ask for at most 5, or give a parameter a wider domain"]
    assert spec_from_dict(_searching("tpe", finite, num_configurations=5)).search.aims_at == ("metric",)
    spec = spec_from_dict(_searching("nsga2", num_configurations=500, time_budget="2h"))
    assert spec.search.aims_at == ("metric", "latency") and spec.search.time_budget == 7200.0


# --------------------------------------------------------------------------------------------
# references validate checks without running anything (issue #37, item 7)
# --------------------------------------------------------------------------------------------


def sweep_problems(*overrides: str) -> list[str]:
    from pipeline.config import check_for_sweep

    spec = load_spec(SMOKE, list(overrides))
    with pytest.raises(SpecError) as info:
        check_for_sweep(spec)
    return info.value.problems


def test_a_package_teacher_is_found_without_importing_it_and_a_missing_one_is_refused():
    """`find_spec("this.x")` imports `this` (printing the Zen of Python): the package's folder is
    found without importing it or its parents, and one that is not installed is a problem."""
    script = ("from pipeline.config import load_spec, check_for_sweep\n"
              "from pipeline.errors import SpecError\n"
              "try:\n    check_for_sweep(load_spec('sweeps/smoke.yaml', ['teacher.model=pkg:this.x/model', 'teacher.architecture=null']))\n"
              "except SpecError as e:\n    print('PROBLEMS', e.problems)\n"
              "import sys; print('IMPORTED' if 'this' in sys.modules else 'NOT IMPORTED')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "Beautiful is better than ugly" not in done.stdout and done.stdout.strip().endswith("NOT IMPORTED"), done.stdout + done.stderr
    assert "teacher.model: package 'this.x' of 'pkg:this.x/model' is not installed" in done.stdout, done.stdout
    (problem,) = sweep_problems("teacher.model=pkg:no_such_package_here/model", "teacher.architecture=null")
    assert problem.startswith("teacher.model: package 'no_such_package_here' of 'pkg:no_such_package_here/model' is not installed")


def test_a_storage_path_of_a_scheme_no_filesystem_serves_is_refused_before_any_work():
    (problem,) = sweep_problems("resources.storage_path=ftp://host/checkpoints")
    assert problem.startswith("resources.storage_path: cannot open ftp://host/checkpoints"), problem


def test_a_work_location_uri_without_a_bucket_is_refused():
    from pipeline.errors import DrydockError
    from pipeline.storage import WorkStore

    with pytest.raises(DrydockError, match=r"^--workdir: s3:// names no bucket"):
        WorkStore.open("s3://")
