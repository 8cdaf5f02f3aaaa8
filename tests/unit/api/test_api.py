"""drydock's Python API (the `drydock` package): specs from files, mappings and overrides; every
problem at once as a typed error; the same answers the commands print; and no logging or MLflow
state left changed, by importing it or by calling it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import drydock

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"


def smoke() -> dict:
    return yaml.safe_load(SMOKE.read_text())


def test_a_spec_loads_from_a_file_a_mapping_or_a_spec_with_overrides_as_lines_or_a_mapping():
    from_file = drydock.load_spec(SMOKE, ["train.epochs=1"])
    from_mapping = drydock.load_spec(smoke(), {"train.epochs": 1})
    assert from_file == from_mapping and from_file.train.epochs == 1
    again = drydock.load_spec(from_file, {"methods.kd.temperature": 3.5, "seeds": [0, 1]})
    assert again.seeds == [0, 1] and again.methods["kd"]["temperature"] == 3.5
    assert from_file.seeds == [0]  # the given spec is not changed
    raw = smoke()
    drydock.load_spec(raw, {"train.epochs": 1})
    assert raw == smoke()  # nor the given mapping


def test_three_mistakes_in_three_sections_are_one_spec_error_with_three_lines(capsys):
    """In one pass, each `field: problem`, a literal's choices named as the other messages name
    them (pydantic's own "Input should be 'fifo' or 'asha'" before)."""
    with pytest.raises(drydock.SpecError) as caught:
        drydock.validate(SMOKE, {"train.epochs": "abc", "search.scheduler": "tpe", "methods.kdd": {}})
    assert caught.value.exit_code == 2
    assert sorted(caught.value.problems) == [
        "methods.kdd: unknown method (registered: cofi, dcr, finetune, kd, minilm, pkd, theseus); did you mean kd?",
        "search.scheduler: 'tpe' is not one of fifo, asha",
        "train.epochs: expected a number (got 'abc')",
    ]
    from pipeline.cli.main import main

    code = main(["validate", str(SMOKE), "--set", "train.epochs=abc", "--set", "search.scheduler=fif", "--set", "methods.kdd={}"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 3, err
    assert "error: search.scheduler: 'fif' is not one of fifo, asha; did you mean fifo?" in err


def test_the_schema_the_methods_and_the_teachers_limits_are_checked_in_one_pass():
    """The checks that need a whole spec run on the rest of it (the fields in error left at their
    defaults), so a schema mistake no longer hides a teacher limit or a method the resources
    cannot train; a problem of a field left out is not said twice."""
    with pytest.raises(drydock.SpecError) as caught:
        drydock.validate(SMOKE, ["train.epochs=abc", "task.max_seq_length=5000", "student.num_layers=9",
                                 "methods.theseus={}", "resources.strategy=deepspeed", "resources.deepspeed={zero_stage: 3}",
                                 "resources.workers_per_trial=2"])
    problems = caught.value.problems
    assert problems[0] == "train.epochs: expected a number (got 'abc')"
    assert any(p.startswith("methods.theseus: cannot train under resources.deepspeed.zero_stage 3 with 2 workers") for p in problems)
    assert "task.max_seq_length: 5000 exceeds the teacher's 512 positions (teacher.architecture); use at most 512" in problems
    assert "student.num_layers: 9 layers exceed the teacher's 4 (teacher.architecture)" in problems
    assert len(problems) == 4
    # a section with a field left out is not judged on the rest of it (tpe's budget under the default grid)
    with pytest.raises(drydock.SpecError) as caught:
        drydock.validate(SMOKE, ["search.algorithm=tpee", "search.num_configurations=1"])
    assert caught.value.problems == ["search.algorithm: 'tpee' is not one of grid, random, tpe, motpe, nsga2; did you mean tpe?"]
    # a field in error that the other checks read is left out, not judged at a value it does not have
    with pytest.raises(drydock.SpecError) as caught:
        drydock.validate(SMOKE, ["task.max_seq_length=abc"])
    assert caught.value.problems == ["task.max_seq_length: expected a whole number (got 'abc')"]


def test_validate_and_plan_return_the_plan_the_commands_print(capsys, monkeypatch):
    from pipeline.cli import plan as plan_module
    from pipeline.cli.main import main

    monkeypatch.setattr(plan_module, "probe_flops_per_thread", lambda: 3e10)  # the same speed in both plans
    plan = drydock.plan(SMOKE)
    assert plan.trials == 3 and plan.configurations == 3  # finetune, and kd's alpha grid of two; one seed
    assert main(["plan", str(SMOKE)]) == 0
    out = capsys.readouterr().out
    assert plan.summary in out.splitlines()[0] and str(plan) in out
    checked = drydock.validate(SMOKE)  # the same counts; its time at the reference speed, unprobed
    assert checked.summary == plan.summary and checked.methods[0].trials == plan.methods[0].trials and not checked.probed


def test_methods_lists_each_registered_plugin_with_its_parameters():
    found = drydock.methods()
    assert {"finetune", "kd", "theseus", "dcr", "pkd", "minilm", "cofi"} <= set(found)
    kd = found["kd"]
    assert kd.name == "kd" and kd.summary
    assert kd.params["temperature"].default == 2.0 and kd.params["alpha"].default == 0.5


def test_a_registry_reference_without_a_store_names_the_missing_setting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(drydock.DrydockError, match=r"tracking_uri: not given, MLFLOW_TRACKING_URI is unset and runs/mlflow.db"):
        drydock.load_student("models:/smoke-student@champion")


# ----------------------------------------------------------------------------------------------
# global state
# ----------------------------------------------------------------------------------------------


LEVELS = textwrap.dedent("""
    import json, logging, sys
    import mlflow  # imported first, as a service that uses MLflow already has
    names = ["", "mlflow", "drydock", "pipeline", "transformers"]
    def state():
        return {n: [logging.getLogger(n).level, len(logging.getLogger(n).handlers)] for n in names}
    before = state()
    import drydock
    after_drydock = state()
    import pipeline.tracking, pipeline.sweep  # the modules a sweep imports: MLflow's store, Ray, the stages
    print(json.dumps([before, after_drydock, state(), mlflow.get_tracking_uri()]))
""")


def test_importing_drydock_or_its_stages_leaves_the_loggers_and_mlflow_as_they_were(tmp_path):
    out = subprocess.run([sys.executable, "-c", LEVELS], cwd=tmp_path, capture_output=True, text=True, timeout=180, check=True).stdout
    before, after_drydock, after_stages, uri = json.loads(out.splitlines()[-1])
    assert after_drydock == before
    assert after_stages["mlflow"] == before["mlflow"] and after_stages[""] == before[""]  # pipeline.tracking set mlflow to WARNING
    assert uri.startswith("sqlite:") or uri.startswith("file:") or uri == "mlruns"  # MLflow's own default, not one of ours


CALLS = textwrap.dedent("""
    import json, logging, sys
    names = ["", "mlflow", "drydock", "pipeline", "transformers", "ray", "optuna"]
    def state():
        return {n: [logging.getLogger(n).level, len(logging.getLogger(n).handlers), logging.getLogger(n).propagate] for n in names}
    # the libraries as a user's process has them: each sets its own logger's level and handler
    # when first imported (transformers at its first module), which is theirs, not drydock's
    import mlflow, optuna, ray, transformers.models.bert.modeling_bert
    before = state()
    import drydock
    spec = drydock.load_spec(sys.argv[1])  # imports the spec's package: the methods, torch and transformers with them
    drydock.validate(spec)
    drydock.methods()
    try:
        drydock.validate(spec, ["train.epochs=0"])
        raise SystemExit("train.epochs=0 validated")
    except drydock.SpecError:
        pass
    print(json.dumps({n: [before[n], v] for n, v in state().items() if v != before[n]}))
""")


def test_calls_put_back_every_level_they_or_the_libraries_they_import_touched(tmp_path):
    """In a fresh process, as a notebook's first cells: the calls set MLflow's, transformers' and
    Optuna's levels (the stages quiet them) and fail once; afterwards every logger is as it was
    before `import drydock`."""
    out = subprocess.run([sys.executable, "-c", CALLS, str(SMOKE)], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {}


def test_train_checks_the_method_before_it_empties_the_output_and_never_empties_the_specs_folder(tmp_path):
    """`replace` empties the folder only once everything else is known good: a mistyped method
    costs nothing (it emptied the folder first before); and a folder holding the spec is refused."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("an earlier run's")
    with pytest.raises(drydock.DrydockError, match=r"--method: unknown method 'kdd'.*did you mean kd\?"):
        drydock.train(SMOKE, "kdd", out, replace=True, workdir=tmp_path / "runs")
    assert (out / "keep.txt").read_text() == "an earlier run's"
    spec = out / "spec.yaml"
    spec.write_text(SMOKE.read_text())
    with pytest.raises(drydock.DrydockError, match=r"--output: .* holds .*spec.yaml; --replace would delete it"):
        drydock.train(spec, "kd", out, replace=True, workdir=tmp_path / "runs")
    assert (out / "keep.txt").is_file() and spec.is_file()


def test_a_spec_given_with_overrides_keeps_its_variables_as_written(monkeypatch):
    from pipeline.config import spec_as_written

    monkeypatch.setenv("DRYDOCK_TEST_URI", "http://u:hunter2@127.0.0.1:1")
    spec = drydock.load_spec({**smoke(), "tracking": {"uri": "${DRYDOCK_TEST_URI}"}})
    again = drydock.load_spec(spec, {"train.epochs": 1})
    assert again.tracking.uri == "http://u:hunter2@127.0.0.1:1" and again.train.epochs == 1
    assert spec_as_written(again)["tracking"]["uri"] == "${DRYDOCK_TEST_URI}"
