"""A trial's outcome file, as the recorder reads what a worker or driver wrote."""

from __future__ import annotations

import json

from pipeline.search.outcome import OUTCOME_FILE, read_outcome, write_outcome


def test_an_outcome_reads_back_as_written_and_a_trial_without_one_reads_none(tmp_path):
    assert read_outcome(tmp_path / "trial") is None
    write_outcome(tmp_path / "trial", {"status": "failed", "error": "diverged at step 3", "steps": 3})
    assert read_outcome(tmp_path / "trial") == {"status": "failed", "error": "diverged at step 3", "steps": 3}


def test_a_later_outcome_replaces_the_earlier_whole_and_leaves_no_scratch(tmp_path):
    write_outcome(tmp_path, {"status": "running", "note": "x" * 1000})
    write_outcome(tmp_path, {"status": "finished"})
    assert json.loads((tmp_path / OUTCOME_FILE).read_text()) == {"status": "finished"}
    assert [p.name for p in tmp_path.iterdir()] == [OUTCOME_FILE]


def test_values_json_cannot_hold_are_written_as_text(tmp_path):
    from pathlib import Path

    write_outcome(tmp_path, {"student_path": Path("/runs/a/student")})
    assert read_outcome(tmp_path) == {"student_path": "/runs/a/student"}
