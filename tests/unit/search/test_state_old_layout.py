"""A run started before the work location's contract (`pipeline.workdir`) resumes on the code
after it: the files below are written by hand, byte for byte as the earlier code wrote them
(its own file names, its own JSON, a spec.json from before the later spec fields existed), and
the run is opened, checked and continued through the current code."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pipeline import results as results_table
from pipeline.config import spec_from_dict, spec_to_dict
from pipeline.errors import DrydockError
from pipeline.search.state import end_run, open_run, start_run
from pipeline.tracking import SweepTracker

RAW = {"name": "s", "task": {"name": "synthetic", "source": "synthetic"},
       "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}}, "methods": {"finetune": {}}}
RUN_ID = "20260101-000000"


def _old_sweep_folder(workdir, parent_run_id: str):
    """What the earlier code left when its driver was killed mid-sweep."""
    sweep_dir = workdir / "s"
    run_dir = sweep_dir / "runs" / RUN_ID
    (run_dir / "trials" / "t0").mkdir(parents=True)
    (sweep_dir / "state.json").write_text(json.dumps({"run_id": RUN_ID, "parent_run_id": parent_run_id, "status": "running"}, indent=2))
    saved = spec_to_dict(spec_from_dict(RAW))
    del saved["train"]["keep_checkpoints"]  # written before these fields existed
    del saved["selection"]["runtimes"], saved["selection"]["latency"]["shapes"], saved["selection"]["latency"]["front_shape"]
    (run_dir / "spec.json").write_text(json.dumps(saved, indent=2))
    row = results_table.trial_row("t0", "finetune", 0, {}, "finished", {"metric": 0.5, "metric_name": "accuracy"})
    results_table.to_frame([row]).to_parquet(sweep_dir / "results.parquet", index=False)
    (run_dir / "trials" / "t0" / "outcome.json").write_text(json.dumps({"status": "finished", "metric": 0.5}, indent=2))
    return sweep_dir


def test_a_run_started_on_the_old_layout_resumes_and_ends_on_the_new_code(tmp_path):
    spec, workdir = spec_from_dict(RAW), tmp_path / "w"
    tracker = SweepTracker(spec, workdir)
    parent = tracker.start_parent(resume=False)
    sweep_dir = _old_sweep_folder(workdir, parent)

    run = open_run(spec, sweep_dir, resume=True, log=print)
    assert run.resuming and run.paths.run_id == RUN_ID
    assert run.paths.spec_file == sweep_dir / "runs" / RUN_ID / "spec.json"
    assert run.paths.trials_dir == sweep_dir / "runs" / RUN_ID / "trials"
    assert run.paths.results == sweep_dir / "results.parquet"

    resumed = SweepTracker(spec, workdir)
    start_run(run, spec, resumed, params={}, teacher_metrics={})
    assert resumed.parent_id == parent  # the interrupted MLflow parent run continues
    assert results_table.read_results(run.paths.results)["trial_id"].tolist() == ["t0"]  # its table stays
    merged = results_table.upsert(run.paths.results, [results_table.trial_row("t1", "finetune", 1, {}, "finished", {"metric": 0.6})])
    assert merged["trial_id"].tolist() == ["t0", "t1"]
    end_run(run, resumed, "FINISHED")
    assert json.loads((sweep_dir / "state.json").read_text()) == {"run_id": RUN_ID, "parent_run_id": parent, "status": "finished"}
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["results.parquet", "runs", "state.json"]  # no scratch left
    assert isinstance(pd.read_parquet(sweep_dir / "results.parquet"), pd.DataFrame)


def test_the_old_layouts_run_still_refuses_a_changed_spec(tmp_path):
    spec = spec_from_dict(RAW, ["train.epochs=9"])
    sweep_dir = _old_sweep_folder(tmp_path / "w", "p")
    with pytest.raises(DrydockError, match=rf"^--resume: the spec differs from the one run {RUN_ID} started with \(train.epochs\)"):
        open_run(spec, sweep_dir, resume=True, log=print)
    # where it runs and how many checkpoints it keeps are not a change
    open_run(spec_from_dict(RAW, ["resources.workers_per_trial=2", "train.keep_checkpoints=2"]), sweep_dir, resume=True, log=print)
