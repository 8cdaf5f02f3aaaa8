"""`drydock sweep` ends with where to look (issue 23, item 5): the report, the command that opens
the MLflow runs it wrote, and the champion a consumer loads."""

from __future__ import annotations

import pytest

from pipeline.cli.outputs import where_to_look
from pipeline.config import spec_from_dict
from pipeline.storage import WorkStore

SPEC = {
    "name": "s1",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "methods": {"kd": {}},
    "tracking": {"registered_model": "sst2-student"},
}


@pytest.fixture(autouse=True)
def _no_tracking_env(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_a_local_sweep_names_its_files_mlflow_ui_and_champion(tmp_path):
    store = WorkStore.open(tmp_path / "work")
    (store.local / "s1").mkdir(parents=True)
    (store.local / "s1" / "report.html").write_text("<html></html>")
    asked = []
    text = where_to_look(spec_from_dict(SPEC), store, champion=lambda uri, name: asked.append((uri, name)) or "3")
    sweep, db = store.local / "s1", f"sqlite:///{store.local / 'mlflow.db'}"
    assert asked == [(db, "sst2-student")]
    assert text.splitlines() == [
        f"results:  {sweep / 'results.parquet'}",
        f"report:   {sweep / 'report.md'}",
        f"          {sweep / 'report.html'}",
        f"plot:     {sweep / 'pareto.png'}",
        f"mlflow:   mlflow ui --backend-store-uri {db}",
        "champion: models:/sst2-student@champion (version 3)",
    ]


def test_a_tracking_server_and_no_champion(tmp_path):
    spec = spec_from_dict({**SPEC, "tracking": {"uri": "http://mlflow.example:5000"}})
    text = where_to_look(spec, WorkStore.open(tmp_path), champion=lambda uri, name: None).splitlines()
    assert "report.html" not in "\n".join(text)  # not written yet: not pointed at
    assert text[-2:] == ["mlflow:   http://mlflow.example:5000 (the tracking server's own UI)",
                         "champion: models:/s1-student@champion (not set: no student was registered)"]


def test_a_registry_that_fails_to_answer_costs_only_the_version(tmp_path):
    def broken(uri, name):
        raise ConnectionError("gone")

    text = where_to_look(spec_from_dict(SPEC), WorkStore.open(tmp_path), champion=broken)
    assert text.splitlines()[-1] == "champion: models:/sst2-student@champion (version not looked up: ConnectionError)"
