"""`drydock sweep` on a real local Ray, MLflow on SQLite and DeepSpeed on the CPU.

Each sweep costs Ray Train's start-up (~10-20 s per trial here), so the tests share one Ray
instance and keep to a handful of tiny trials.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient

from pipeline import results as results_table
from pipeline.config import load_spec
from pipeline.select.champion import CHAMPION

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One work directory for the module: the tokenized data and the teacher are made once."""
    return tmp_path_factory.mktemp("sweeps")


def child_runs(workdir: Path, experiment: str):
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("drydock.role") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


@pytest.mark.slow
def test_smoke_sweep_with_asha_records_every_trial_and_isolates_a_failure(ray_local, workdir):
    from pipeline.sweep import run_sweep

    tmp_path = workdir
    spec = load_spec(SMOKE, [
        # a learning rate of 1e30 diverges at its first step: that trial fails, the others go on
        # (a setting the teacher rules out, such as 9 of its 4 layers, now stops the sweep before any work)
        "methods.finetune.learning_rate={grid: [1.0e-3, 1.0e+30]}",
        "methods.kd.alpha=0.5",  # one kd trial: three trials show all of it, a fourth cost ~25 s
        "search.max_failures=0",
    ])
    frame = run_sweep(spec, tmp_path)
    results = pd.read_parquet(tmp_path / "smoke" / "results.parquet")
    assert list(results.columns) == results_table.ordered_columns(list(results.columns))
    for column in ["trial_id", "method", "seed", "status", "error", "metric_name", "metric", "teacher_metric", "retention",
                   "num_params", "num_params_encoder", "latency_ms", "latency_p90_ms", "speedup", "train_seconds", "steps",
                   "pareto", "student_path", "mlflow_run_id", "params.alpha", "params.learning_rate", "metrics.accuracy"]:
        assert column in results.columns, column
    assert len(results) == 3 and results["trial_id"].is_unique
    failed = results[results["status"] == "failed"]
    assert len(failed) == 1 and failed.iloc[0]["params.learning_rate"] == 1e30
    assert "loss is not finite at step 1" in failed.iloc[0]["error"]
    done = results[results["status"] != "failed"]
    assert set(done["status"]) <= {"finished", "stopped"} and (done["status"] == "finished").any()
    finished = done[done["status"] == "finished"]
    assert finished["metric"].between(0, 1).all() and finished["num_params_encoder"].gt(0).all()
    assert all(Path(p, "config.json").is_file() for p in finished["student_path"])
    # measure and select: latency and speedup for every finished trial, the front marked,
    # report files written, the front registered and a champion alias set
    assert finished["latency_ms"].gt(0).all() and finished["speedup"].gt(0).all()
    assert (finished["latency_p90_ms"] >= finished["latency_ms"]).all()
    assert finished["pareto"].notna().all() and finished["pareto"].any()
    assert results.loc[results["status"] == "failed", "pareto"].isna().all()
    for name in ("report.md", "report.html", "pareto.png"):
        assert (tmp_path / "smoke" / name).stat().st_size > 0
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    versions = client.search_model_versions("name='smoke-student'")
    # one version per point of the front: configurations tied exactly (metric and latency) share one
    points = finished.loc[finished["pareto"].astype(bool), ["metric", "latency_ms"]].drop_duplicates()
    assert len(versions) == len(points)
    champion = client.get_model_version_by_alias("smoke-student", CHAMPION)
    assert champion.version in {v.version for v in versions}

    parents, children = child_runs(tmp_path, "smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.metrics["teacher/accuracy"] > 0
    assert len(children) == 3
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert {c.info.run_id for c in children} == set(results["mlflow_run_id"])
    assert all(c.info.status in ("FINISHED", "FAILED") for c in children)
    by_id = {c.info.run_id: c for c in children}
    for _, row in finished.iterrows():
        run = by_id[row["mlflow_run_id"]]
        assert run.data.metrics["final/accuracy"] == pytest.approx(row["metric"])
        assert run.data.params["method"] == row["method"]
        history = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_metric_history(run.info.run_id, "eval/accuracy")
        # every evaluation (eval_every: 8) reached Tune and MLflow once, at its step
        assert sorted(h.step for h in history) == list(range(8, int(row["steps"]) + 1, 8))
    assert len(frame) == 3


@pytest.mark.slow
@pytest.mark.timeout(420)  # the failure this guards against is a hang
def test_trials_asha_stops_mid_run_do_not_stall_the_trials_after_them(ray_local, workdir):
    """From a random start, lr 1e-3 is at 0.445 after epoch 1 and the tiny rates at 0.555: one
    trial at a time, the second reaches the first rung behind the first and ASHA stops it mid-run
    (4 epochs: its worker, held back by Train's one report per health check, is still training
    then). A third trial follows it. With Tune reusing actors, the stopped trial's actor (its
    driver still inside fit()) was handed to the next trial, whose reset failed; Tune failed that
    trial and the sweep hung. (One trial at a time, three suffice: five, two at a time, cost the
    suite ~100 s more.)"""
    from pipeline.sweep import run_sweep

    spec = load_spec(SMOKE, [
        "name=smoke-asha", "tracking.experiment=smoke-asha", "train.epochs=4", "search.scheduler=asha",
        "methods={kd: {init_from: pretrained, learning_rate: {grid: [1.0e-7, 1.0e-3, 2.0e-7]}}}",
        "search.max_concurrent_trials=1",
    ])
    frame = run_sweep(spec, workdir)
    seen = frame[["trial_id", "params.learning_rate", "status", "steps", "metric", "error"]].to_string()
    assert len(frame) == 3 and frame["trial_id"].is_unique, seen
    by_lr = frame.set_index("params.learning_rate")
    assert by_lr.loc[1.0e-3, "status"] == "stopped" and by_lr.loc[1.0e-3, "steps"] < 64, seen
    assert (by_lr.drop(index=1.0e-3)["status"] == "finished").all(), seen
    _, children = child_runs(workdir, "smoke-asha")
    assert sorted(c.info.run_name for c in children) == sorted(frame["trial_id"])


def test_a_teacher_that_diverges_on_the_workers_stops_the_sweep_with_the_reason(ray_local, workdir):
    """The worker returns normally with the reason instead of raising: raised, Train would retry
    it (diverging again each time) and the driver could only say that the run failed."""
    from pipeline.errors import DrydockError
    from pipeline.prepare.stage import prepare
    from pipeline.sweep import run_sweep
    from pipeline.training.teacher import teacher_key

    spec = load_spec(SMOKE, ["name=smoke-nan", "tracking.experiment=smoke-nan", "resources.teacher_placement=workers",
                             "teacher.finetune.learning_rate=1e30", "search.max_failures=2"])
    key = teacher_key(spec, prepare(spec, workdir))
    with pytest.raises(DrydockError) as failure:
        run_sweep(spec, workdir, log=lambda _: None)
    assert str(failure.value) == (
        "teacher: fine-tuning random diverged (loss is not finite at step 1 (phase finetune): task=nan, total=nan); "
        "teacher.finetune.learning_rate is 1e+30: try a lower one")
    assert not (workdir / "teachers" / key).exists() and not (workdir / "teachers" / f".run-{key}").exists()


def test_a_trial_the_cluster_cannot_hold_fails_before_the_teacher_stage(ray_local, workdir):
    """The teacher stage needs a trial's resources too: asked for a GPU here, it would wait for
    workers instead of saying why."""
    from pipeline.errors import DrydockError
    from pipeline.search.ray_instance import max_concurrent
    from pipeline.sweep import run_sweep

    spec = load_spec(SMOKE, ["name=smoke-gpu", "resources.use_gpu=true", "resources.teacher_placement=workers",
                             "teacher.finetune.epochs=3"])
    messages: list[str] = []
    with pytest.raises(DrydockError, match=r"^resources: a trial needs 1 GPUs \(1 workers\), but the Ray cluster has 0$"):
        run_sweep(spec, workdir, log=messages.append)
    assert not any(m.startswith("teacher:") for m in messages), messages
    # a number set in the spec is trusted (an autoscaling cluster grows), with a word on what waits
    cpus = int(__import__("ray").cluster_resources()["CPU"])
    wanted = load_spec(SMOKE, [f"search.max_concurrent_trials={cpus + 2}"])
    assert max_concurrent(wanted, messages.append) == cpus + 2
    assert messages[-1].startswith(f"search: max_concurrent_trials is {cpus + 2}, but the Ray cluster holds {cpus} trial(s) now")


def test_a_wrong_tracking_uri_fails_before_any_work(tmp_path):
    from pipeline.errors import DrydockError
    from pipeline.sweep import run_sweep

    spec = load_spec(SMOKE, ["name=smoke-uri", "tracking.uri=sqllite:///mlflow.db"])
    with pytest.raises(DrydockError, match=r"^tracking.uri: cannot use the MLflow tracking store 'sqllite:///mlflow.db': .*unsupported URI"):
        run_sweep(spec, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing tokenized, no sweep folder


def test_a_run_that_fails_before_training_leaves_the_previous_results_in_place(tmp_path):
    """The previous run's table moves into its run folder only once a new run really starts."""
    from pipeline.errors import DataError
    from pipeline.sweep import run_sweep

    glue = tmp_path / "glue" / "SST-2"
    glue.mkdir(parents=True)
    for split in ("train", "dev"):
        (glue / f"{split}.tsv").write_text("sentence\tscore\na fine film\t1\n")  # no `label` column
    spec = load_spec(SMOKE, ["name=sst2-broken", "task.name=sst2", "task.source=glue_dir", f"task.glue_dir={tmp_path / 'glue'}"])
    sweep_dir = tmp_path / "work" / "sst2-broken"
    (sweep_dir / "runs" / "20260101-000000").mkdir(parents=True)
    (sweep_dir / "state.json").write_text(json.dumps({"run_id": "20260101-000000", "status": "finished"}))
    (sweep_dir / "results.parquet").write_bytes(b"the previous run's table")
    with pytest.raises(DataError, match="label"):
        run_sweep(spec, tmp_path / "work", log=lambda _: None)
    assert (sweep_dir / "results.parquet").read_bytes() == b"the previous run's table"
    assert sorted(p.name for p in (sweep_dir / "runs").iterdir()) == ["20260101-000000"]


def test_resume_refuses_a_spec_that_changed_but_not_other_resources(tmp_path):
    from pipeline.config import spec_to_dict
    from pipeline.errors import DrydockError
    from pipeline.search.state import check_resumable
    from pipeline.sweep import run_sweep

    started = load_spec(SMOKE, ["name=smoke-resume"])
    run_dir = tmp_path / "smoke-resume" / "runs" / "20260101-000000"
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(json.dumps(spec_to_dict(started)))
    (tmp_path / "smoke-resume" / "state.json").write_text(json.dumps({"run_id": "20260101-000000", "status": "running"}))
    changed = load_spec(SMOKE, ["name=smoke-resume", "train.learning_rate=0.01", "methods={finetune: {}, kd: {}, pkd: {}}"])
    with pytest.raises(DrydockError, match=r"^--resume: the spec differs from the one run 20260101-000000 started with "
                                           r"\(methods.kd, methods.kd.alpha.grid, methods.kd.temperature, methods.pkd, train.learning_rate\); "):
        run_sweep(changed, tmp_path, resume=True, log=lambda _: None)
    assert not (tmp_path / "cache").exists()  # refused before any work
    # where it runs may change (another cluster, more workers); the same spec resumes
    check_resumable(load_spec(SMOKE, ["name=smoke-resume", "resources.workers_per_trial=2"]), run_dir / "spec.json", "x")
    check_resumable(started, run_dir / "spec.json", "x")


def test_a_bad_deepspeed_preset_fails_before_any_work(workdir):
    """`load_spec` refuses it (tests/unit/config/test_checks.py); a spec built without
    it, from a dict, is refused by the sweep before anything is written."""
    import yaml

    from pipeline.config import spec_from_dict
    from pipeline.errors import DrydockError
    from pipeline.sweep import run_sweep

    spec = spec_from_dict(yaml.safe_load(SMOKE.read_text()),
                          ["name=smoke-bad", "resources.strategy=deepspeed", "resources.deepspeed.preset=/nowhere/ds.json"])
    with pytest.raises(DrydockError, match="resources.deepspeed.preset: /nowhere/ds.json is not a file"):
        run_sweep(spec, workdir)
    assert not (workdir / "smoke-bad").exists()


def test_a_setting_the_teacher_rules_out_stops_the_sweep_before_any_work(tmp_path):
    """9 layers of a 4-layer teacher: refused with the field named, before Ray, data or MLflow."""
    from pipeline.errors import DrydockError
    from pipeline.sweep import run_sweep

    spec = load_spec(SMOKE, ["methods.finetune.num_layers={grid: [2, 9]}"])
    with pytest.raises(DrydockError, match=r"methods\.finetune\.num_layers: 9 layers exceed the teacher's 4"):
        run_sweep(spec, tmp_path / "w", log=lambda _: None)
    assert not (tmp_path / "w").exists()
