"""A sweep's runs on disk: which run a sweep continues, where its storage is, and when it takes
the sweep's folder over (real MLflow on SQLite; no Ray)."""

from __future__ import annotations

import json

import pytest

from pipeline.config import spec_from_dict, spec_to_dict
from pipeline.errors import DrydockError
from pipeline.search.state import (
    STATE_FILE,
    RunStorage,
    SweepPaths,
    check_resumable,
    end_run,
    open_run,
    read_state,
    run_storage,
    save_state,
    start_run,
    write_spec_files,
)
from pipeline.tracking import SweepTracker

RAW = {"name": "s", "task": {"name": "synthetic", "source": "synthetic"},
       "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}}, "methods": {"finetune": {}}}


def test_storage_is_the_run_folder_or_the_specs_shared_path(tmp_path):
    paths = SweepPaths(tmp_path / "s", "r1")
    assert run_storage(spec_from_dict(RAW), paths) == RunStorage(str(paths.run_dir), "tune", str(paths.run_dir / "train"))
    shared = run_storage(spec_from_dict(RAW, ["resources.storage_path=s3://bucket/drydock/"]), paths)
    assert shared == RunStorage("s3://bucket/drydock", "s-r1-tune", "s3://bucket/drydock/s-r1-train")
    assert shared.experiment_path == "s3://bucket/drydock/s-r1-tune"


def test_resume_continues_the_recorded_run_and_refuses_a_changed_spec(tmp_path):
    spec, messages = spec_from_dict(RAW), []
    fresh = open_run(spec, tmp_path / "s", resume=True, log=messages.append)
    assert not fresh.resuming and messages == [f"resume: no earlier run of 's' in {tmp_path / 's'}; starting a new one"]
    assert not (tmp_path / "s").exists()  # deciding touches nothing

    save_state(tmp_path / "s", {"run_id": "20260101-000000", "parent_run_id": "p", "status": "running"})
    again = open_run(spec, tmp_path / "s", resume=True, log=messages.append)
    assert again.resuming and again.paths.run_id == "20260101-000000" and again.state["parent_run_id"] == "p"
    assert open_run(spec, tmp_path / "s", resume=False, log=messages.append).paths.run_id != "20260101-000000"

    again.paths.spec_file.parent.mkdir(parents=True)
    again.paths.spec_file.write_text(json.dumps(spec_to_dict(spec_from_dict(RAW, ["train.epochs=9"]))))
    with pytest.raises(DrydockError, match=r"^--resume: the spec differs from the one run 20260101-000000 started with \(train.epochs\)"):
        open_run(spec, tmp_path / "s", resume=True, log=messages.append)


def test_a_resumed_run_keeps_the_bf16_decision_its_spec_json_records(tmp_path):
    """`auto` is decided when the run starts and spec.json holds the decision: resuming with the
    same `auto` spec is no change, and the remaining trials get the recorded decision."""
    from pipeline.search.state import saved_bf16

    spec = spec_from_dict(RAW)  # train.bf16: auto
    save_state(tmp_path / "s", {"run_id": "20260101-000000", "parent_run_id": "p", "status": "running"})
    first = open_run(spec, tmp_path / "s", resume=False, log=print)
    assert saved_bf16(first) is None  # a new run decides afresh
    paths = SweepPaths(tmp_path / "s", "20260101-000000")
    paths.spec_file.parent.mkdir(parents=True)
    paths.spec_file.write_text(json.dumps(spec_to_dict(spec_from_dict(RAW, ["train.bf16=on"]))))
    again = open_run(spec, tmp_path / "s", resume=True, log=print)
    assert again.resuming and saved_bf16(again) == "on"
    with pytest.raises(DrydockError, match=r"\(train.bf16\)"):  # a spec that says otherwise than auto is a change
        open_run(spec_from_dict(RAW, ["train.bf16=off"]), tmp_path / "s", resume=True, log=print)


def test_a_new_run_takes_the_folder_over_and_records_how_it_ended(tmp_path):
    spec, workdir = spec_from_dict(RAW), tmp_path / "w"
    sweep_dir = workdir / "s"
    save_state(sweep_dir, {"run_id": "old", "status": "finished"})
    (sweep_dir / "runs" / "old").mkdir(parents=True)
    (sweep_dir / "results.parquet").write_bytes(b"the old run's table")
    run = open_run(spec, sweep_dir, resume=False, log=print)
    tracker = SweepTracker(spec, workdir)

    start_run(run, spec, tracker, params={"task": "synthetic"}, teacher_metrics={"eval/accuracy": 0.9, "step": 4, "note": "x"})
    assert (sweep_dir / "runs" / "old" / "results.parquet").read_bytes() == b"the old run's table"
    assert not run.paths.results.exists() and run.paths.trials_dir.is_dir()
    assert json.loads(run.paths.spec_file.read_text()) == spec_to_dict(spec)
    assert read_state(sweep_dir) == {"run_id": run.paths.run_id, "parent_run_id": tracker.parent_id, "status": "running"}
    parent = tracker.client.get_run(tracker.parent_id)
    assert parent.data.params["task"] == "synthetic"
    assert parent.data.metrics == {"teacher/accuracy": 0.9, "teacher/step": 4.0}

    end_run(run, tracker, "FAILED")  # the sweep raised
    assert tracker.client.get_run(tracker.parent_id).info.status == "KILLED"
    assert json.loads((sweep_dir / STATE_FILE).read_text())["status"] == "failed"


def test_resume_accepts_another_number_of_kept_checkpoints_and_a_spec_saved_before_the_field(tmp_path):
    spec_file = tmp_path / "spec.json"
    saved = spec_to_dict(spec_from_dict(RAW))
    spec_file.write_text(json.dumps(saved))
    check_resumable(spec_from_dict(RAW, ["train.keep_checkpoints=3"]), spec_file, "r")  # how many it keeps, not what it trains
    del saved["train"]["keep_checkpoints"]  # a run started before train.keep_checkpoints existed
    spec_file.write_text(json.dumps(saved))
    check_resumable(spec_from_dict(RAW), spec_file, "r")
    # ... or before the runtime variants' fields (issue 22): they take their defaults
    del saved["selection"]["runtimes"], saved["selection"]["latency"]["shapes"], saved["selection"]["latency"]["front_shape"]
    spec_file.write_text(json.dumps(saved))
    check_resumable(spec_from_dict(RAW), spec_file, "r")
    with pytest.raises(DrydockError, match=r"selection\.runtimes"):  # set to other than the default: a change
        check_resumable(spec_from_dict(RAW, ["selection.runtimes=[torch]"]), spec_file, "r")


def test_a_secret_passed_through_the_environment_is_stored_as_written_and_resumes(tmp_path, monkeypatch):
    """spec.json, and the parent run's copy of it in MLflow, hold `${VAR}` as the spec wrote it,
    never the credential it expanded to; a resume compares as written (the same spec resumes, a
    field written otherwise is still a change; the variable's value is compared through a salted
    digest: the next test), and a spec.json written before, which holds the values, still resumes."""
    monkeypatch.setenv("DRYDOCK_TEST_URI", f"sqlite:///{tmp_path / 'secret-user:hunter2.db'}")
    monkeypatch.setenv("DRYDOCK_TEST_EPOCHS", "3")
    raw = {**RAW, "tracking": {"uri": "${DRYDOCK_TEST_URI}"}, "train": {"epochs": "${DRYDOCK_TEST_EPOCHS}"}}
    spec, workdir = spec_from_dict(raw), tmp_path / "w"
    assert spec.tracking.uri.endswith("secret-user:hunter2.db") and spec.train.epochs == 3
    run = open_run(spec, workdir / "s", resume=False, log=print)
    tracker = SweepTracker(spec, workdir)
    start_run(run, spec, tracker, params={"task": "synthetic"}, teacher_metrics={})
    text = run.paths.spec_file.read_text()
    assert "hunter2" not in text and json.loads(text)["tracking"]["uri"] == "${DRYDOCK_TEST_URI}"
    assert json.loads(text)["train"]["epochs"] == "${DRYDOCK_TEST_EPOCHS}"
    logged = tracker.client.download_artifacts(tracker.parent_id, "spec.json", str(tmp_path / "dl"))
    assert "hunter2" not in open(logged).read()

    check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")  # the same spec, the same environment
    with pytest.raises(DrydockError, match=r"\(train.epochs\)"):  # the field written otherwise: a change
        check_resumable(spec_from_dict({**raw, "train": {"epochs": 5}}), run.paths.spec_file, "r")
    run.paths.spec_file.write_text(json.dumps(spec_to_dict(spec)))  # as runs before this change wrote it: the values
    check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")


def test_a_variable_whose_value_changed_since_the_run_started_is_a_change_on_resume(tmp_path, monkeypatch):
    """spec.json holds `${VAR}` as written, so the value is compared through a salted digest kept
    beside it (spec-values.json, no value in clear): `train.epochs: ${EPOCHS}` at 3, then 5 at
    resume, is refused as a change of that field. A credential in a URI is not part of the value
    compared (a rotated password resumes), where the URI points is; a run started before digests
    were kept resumes as before."""
    from pipeline.workdir import SPEC_VALUES_FILE

    secret = f"sqlite:///{tmp_path / 'db'}".replace("sqlite:///", "https://user:hunter2@tracking.example/") + "?token=abc123"
    monkeypatch.setenv("DRYDOCK_TEST_URI", secret)
    monkeypatch.setenv("DRYDOCK_TEST_EPOCHS", "3")
    raw = {**RAW, "tracking": {"uri": "${DRYDOCK_TEST_URI}"}, "train": {"epochs": "${DRYDOCK_TEST_EPOCHS}"}}
    spec, workdir = spec_from_dict(raw), tmp_path / "w"
    run = open_run(spec, workdir / "s", resume=False, log=print)
    write_spec_files(run.paths, spec)
    values = run.paths.spec_file.parent / SPEC_VALUES_FILE
    assert values.is_file() and "hunter2" not in values.read_text() and "abc123" not in values.read_text()
    assert set(json.loads(values.read_text())["values"]) == {"tracking.uri", "train.epochs"}

    check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")  # the same values
    monkeypatch.setenv("DRYDOCK_TEST_EPOCHS", "5")
    with pytest.raises(DrydockError, match=r"\(train.epochs: the value of its variable\)"):
        check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")
    monkeypatch.setenv("DRYDOCK_TEST_EPOCHS", "3")
    monkeypatch.setenv("DRYDOCK_TEST_URI", secret.replace("hunter2", "rotated").replace("abc123", "xyz"))
    check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")  # new credentials, the same server
    monkeypatch.setenv("DRYDOCK_TEST_URI", secret.replace("user:hunter2", "TOKEN42"))
    check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")  # a token given as the user: not compared either
    monkeypatch.setenv("DRYDOCK_TEST_URI", secret.replace("tracking.example", "other.example"))
    with pytest.raises(DrydockError, match=r"\(tracking.uri: the value of its variable\)"):
        check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")
    values.unlink()  # a run started before the digests were kept
    check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")


def test_a_resume_on_a_fresh_node_reads_the_value_digests_from_the_work_location(tmp_path, monkeypatch):
    """With a URI as the work location, a resume on another node (an empty mirror) fetches the
    digests with spec.json, so a changed variable is caught there too."""
    import shutil

    from pipeline.storage import CACHE_ENV, WorkStore
    from pipeline.workdir import SPEC_FILE, SPEC_VALUES_FILE

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "node1"))
    monkeypatch.setenv("DRYDOCK_TEST_EPOCHS", "3")
    raw = {**RAW, "train": {"epochs": "${DRYDOCK_TEST_EPOCHS}"}}
    spec, uri = spec_from_dict(raw), (tmp_path / "bucket").as_uri()
    store = WorkStore.open(uri)
    run = open_run(spec, store.path(spec.name), resume=False, log=print, store=store)
    write_spec_files(run.paths, spec)
    save_state(run.paths.sweep_dir, {"run_id": run.paths.run_id, "status": "running"})
    for name in (f"{spec.name}/state.json", *(f"{spec.name}/runs/{run.paths.run_id}/{f}" for f in (SPEC_FILE, SPEC_VALUES_FILE))):
        store.push(name)
    shutil.rmtree(tmp_path / "node1")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "node2"))  # another node: nothing in its mirror
    monkeypatch.setenv("DRYDOCK_TEST_EPOCHS", "5")
    fresh = WorkStore.open(uri)
    with pytest.raises(DrydockError, match=r"\(train.epochs: the value of its variable\)"):
        open_run(spec_from_dict(raw), fresh.path(spec.name), resume=True, log=print, store=fresh)


def test_a_value_the_run_decided_is_compared_as_written_not_by_its_digest(tmp_path, monkeypatch):
    """`train.bf16: ${BF16:-auto}` decided `on` when the run started: spec.json holds `on`, no
    digest is kept for it, and a resume given `auto` again resumes."""
    from pipeline.workdir import SPEC_VALUES_FILE

    monkeypatch.delenv("DRYDOCK_TEST_BF16", raising=False)
    raw = {**RAW, "train": {"bf16": "${DRYDOCK_TEST_BF16:-auto}"}}
    spec = spec_from_dict(raw)
    decided = spec.model_copy(update={"train": spec.train.model_copy(update={"bf16": "on"})})
    run = open_run(decided, tmp_path / "s", resume=False, log=print)
    write_spec_files(run.paths, decided)
    assert json.loads(run.paths.spec_file.with_name(SPEC_VALUES_FILE).read_text())["values"] == {}
    check_resumable(spec_from_dict(raw), run.paths.spec_file, "r")


def test_a_field_changed_after_loading_keeps_its_new_value_as_written():
    from pipeline.config import spec_as_written

    spec = spec_from_dict({**RAW, "name": "${DRYDOCK_NO_SUCH_VAR:-s}", "seeds": ["${DRYDOCK_NO_SUCH_VAR:-7}", 8]})
    assert spec.name == "s" and spec.seeds == [7, 8]
    written = spec_as_written(spec)
    assert written["name"] == "${DRYDOCK_NO_SUCH_VAR:-s}" and written["seeds"] == ["${DRYDOCK_NO_SUCH_VAR:-7}", 8]
    renamed = spec.model_copy(update={"name": "other"})  # a value set since (a pinned revision): kept
    assert spec_as_written(renamed)["name"] == "other"


def test_what_a_run_decided_still_resumes_when_the_field_was_given_as_a_variable(tmp_path, monkeypatch):
    """`train.bf16: ${BF16:-auto}`: spec.json holds the run's decision (`on`), and the spec given
    at resume says `auto` through the variable: no change, as for a plain `auto`."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_to_dict(spec_from_dict(RAW, ["train.bf16=on"]))))
    monkeypatch.delenv("DRYDOCK_TEST_BF16", raising=False)
    check_resumable(spec_from_dict({**RAW, "train": {"bf16": "${DRYDOCK_TEST_BF16:-auto}"}}), spec_file, "r")


def test_the_saved_spec_of_a_report_does_without_a_variable_unset_here(tmp_path, monkeypatch):
    from pipeline.config import spec_as_written
    from pipeline.select.report import saved_spec

    monkeypatch.setenv("DRYDOCK_TEST_SECRET_URI", "http://u:pw@127.0.0.1:1")
    spec = spec_from_dict({**RAW, "tracking": {"uri": "${DRYDOCK_TEST_SECRET_URI}"}})
    (tmp_path / "spec.json").write_text(json.dumps(spec_as_written(spec)))
    assert saved_spec(tmp_path).tracking.uri == "http://u:pw@127.0.0.1:1"  # expanded from this environment
    monkeypatch.delenv("DRYDOCK_TEST_SECRET_URI")
    assert saved_spec(tmp_path) is None  # `drydock report` goes on without it, rather than failing
