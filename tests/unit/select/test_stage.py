"""The select stage writes each run's report files into the run's own folder
(`<sweep>/runs/<run id>/`) and copies them to the sweep's top level; a run that built no
runtime variants leaves no older run's variants.parquet there, nor in the work location."""

from __future__ import annotations

from pipeline import results as results_table
from pipeline.measure.table import variants_path, write_variants
from pipeline.select.report import rebuild_report
from tests.conftest import FakeTracker, variant, variants_of
from tests.unit.select.test_report import NAMES, SPEC, start_run


def test_the_select_stage_writes_into_the_runs_folder_and_copies_to_the_top_level(tmp_path):
    from pipeline.select.stage import select_stage

    sweep_dir = tmp_path / "demo"
    start_run(sweep_dir, "r1", metric=0.61, teacher_p50=10.0)
    rebuild_report(sweep_dir)
    before = {name: (sweep_dir / "runs" / "r1" / name).read_bytes() for name in (*NAMES, "latency.json")}
    start_run(sweep_dir, "r2", metric=0.71, teacher_p50=20.0)
    (sweep_dir / "runs" / "r2" / "latency.json").unlink()  # the select stage writes it
    # r1 had built runtime variants (its copy at the top); r2 builds none
    old_variants = variants_of([variant("teacher", "torch", 0.9, 10.0, "/nowhere/teacher"),
                                variant("finetune-s0", "onnxruntime-int8", 0.6, 2.0, "/nowhere/model.int8.onnx")])
    for folder in (sweep_dir, sweep_dir / "runs" / "r1"):
        write_variants(variants_path(folder), old_variants)
    tracker, messages = FakeTracker(), []
    select_stage(SPEC, tmp_path, sweep_dir, tracker, None, messages.append)  # no student folder: nothing timed

    run_dir = sweep_dir / "runs" / "r2"
    for name in (*NAMES, "latency.json"):
        assert (run_dir / name).is_file(), name
        assert (sweep_dir / name).read_bytes() == (run_dir / name).read_bytes(), name
        assert (sweep_dir / "runs" / "r1" / name).read_bytes() == before[name], name
    assert "0.7150" in (sweep_dir / "report.md").read_text()
    assert {p.parent for p in tracker.artifacts if p.name != results_table.RESULTS_FILE} == {run_dir}
    assert not [p for p in sweep_dir.iterdir() if p.name.startswith(".")]  # no temporary copy left
    # the top level holds r2's set: no variants, so not r1's either; r1 keeps its own
    assert not variants_path(sweep_dir).exists() and variants_path(sweep_dir / "runs" / "r1").is_file()
    assert "Runtimes" not in (sweep_dir / "report.md").read_text()
    write_variants(variants_path(sweep_dir), old_variants)  # a copy left by an older drydock: still not r2's
    assert "Runtimes" not in rebuild_report(sweep_dir).markdown.read_text()
    assert "Runtimes" in rebuild_report(sweep_dir / "runs" / "r1").markdown.read_text()


def test_a_run_without_variants_removes_the_older_runs_copy_from_the_store_too(tmp_path, monkeypatch):
    from pipeline.select.stage import select_stage
    from pipeline.storage import WorkStore

    monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "cache"))
    bucket = tmp_path / "bucket"
    store = WorkStore.open(bucket.as_uri())  # a file:// location: a store with this node's mirror, as s3:// is
    sweep_dir = store.path("demo")
    start_run(sweep_dir, "r1", metric=0.61, teacher_p50=10.0)
    write_variants(variants_path(sweep_dir), variants_of([variant("finetune-s0", "torch", 0.6, 2.0, "/nowhere")]))
    store.push("demo/variants.parquet")
    assert (bucket / "demo" / "variants.parquet").is_file()
    start_run(sweep_dir, "r2", metric=0.71, teacher_p50=20.0)
    select_stage(SPEC, store.local, sweep_dir, FakeTracker(), None, lambda _: None, store=store)
    assert not variants_path(sweep_dir).exists() and not (bucket / "demo" / "variants.parquet").exists()
