"""drydock's Python API (the `drydock` package): specs from files, mappings and overrides; every
problem at once as a typed error; the same answers the commands print; and no logging or MLflow
state left changed, by importing it or by calling it."""

from __future__ import annotations

import json
import logging
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


def test_validate_and_plan_return_the_plan_the_commands_print(capsys):
    from pipeline.cli.main import main

    plan = drydock.plan(SMOKE)
    assert plan.trials == 3 and plan.configurations == 3  # finetune, and kd's alpha grid of two; one seed
    assert main(["plan", str(SMOKE)]) == 0
    out = capsys.readouterr().out
    assert plan.summary in out.splitlines()[0] and str(plan) in out
    assert drydock.validate(SMOKE) == plan


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


def test_a_call_puts_back_every_level_it_touched(capsys):
    """A call that runs (validate imports transformers, whose import sets its verbosity) and a
    call that fails leave the loggers as they found them; without a configured handler the
    call's lines are shown, and afterwards nothing of drydock's is attached."""
    names = ["", "mlflow", "drydock", "pipeline", "transformers", "ray", "optuna"]
    logging.getLogger("transformers").setLevel(logging.INFO)
    before = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in names}
    drydock.validate(SMOKE)
    with pytest.raises(drydock.SpecError):
        drydock.validate(SMOKE, ["train.epochs=0"])
    after = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in names}
    assert after == before
