"""The work location's contract (`pipeline.workdir`): a write is whole or not at all, and a
writer that dies mid-write leaves the old file and nothing a reader or a push would take."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, model_validator

from pipeline import workdir
from pipeline.workdir import (
    Counts,
    atomic_folder,
    atomic_path,
    atomic_write,
    current_run_dir,
    fingerprint_settings,
    read_state,
    resume_exempt,
)


class Crash(RuntimeError):
    pass


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_atomic_write_replaces_the_file_and_leaves_no_scratch(tmp_path):
    target = tmp_path / "state.json"
    atomic_write(target, "old")
    atomic_write(target, b"new")
    assert target.read_text() == "new"
    assert _names(tmp_path) == ["state.json"]


def test_a_crash_mid_write_keeps_the_old_file_whole_and_removes_the_scratch(tmp_path):
    target = tmp_path / "results.parquet"
    target.write_text("old table")
    with pytest.raises(Crash), atomic_path(target) as tmp:
        tmp.write_text("half a tab")
        assert tmp.parent == tmp_path and tmp.name.startswith(".results.parquet.")  # hidden: a push skips it
        raise Crash
    assert target.read_text() == "old table"
    assert _names(tmp_path) == ["results.parquet"]


def test_the_written_file_gets_the_umask_mode_like_its_neighbours(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write(tmp_path / "README.md", "card")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_two_writers_never_share_a_scratch_name(tmp_path):
    target = tmp_path / "outcome.json"
    with atomic_path(target) as a, atomic_path(target) as b:
        assert a != b
        a.write_text("a")
        b.write_text("b")
    assert target.read_text() == "a"  # the outer block renamed last


def test_atomic_folder_publishes_whole_or_not_at_all(tmp_path):
    final = tmp_path / "cache" / "data-1"
    with pytest.raises(Crash), atomic_folder(final) as scratch:
        (scratch / "part").write_text("half")
        assert not final.exists()
        raise Crash
    assert not final.exists() and _names(tmp_path / "cache") == []
    with atomic_folder(final) as scratch:
        (scratch / "part").write_text("whole")
    assert (final / "part").read_text() == "whole" and _names(tmp_path / "cache") == ["data-1"]


def test_a_folder_another_process_published_first_is_kept(tmp_path):
    final = tmp_path / "data-1"
    with atomic_folder(final) as scratch:
        (scratch / "ours").write_text("ours")
        final.mkdir()
        (final / "theirs").write_text("theirs")
    assert _names(final) == ["theirs"] and _names(tmp_path) == ["data-1"]


def test_replace_swaps_the_folder_and_a_failed_build_keeps_the_old_one(tmp_path):
    final = tmp_path / "checkpoint"
    final.mkdir()
    (final / "step").write_text("1")
    with pytest.raises(Crash), atomic_folder(final, replace=True) as scratch:
        (scratch / "step").write_text("2")
        raise Crash
    assert (final / "step").read_text() == "1"
    with atomic_folder(final, replace=True) as scratch:
        (scratch / "step").write_text("2")
    assert _names(final) == ["step"] and (final / "step").read_text() == "2"
    assert _names(tmp_path) == ["checkpoint"]


def test_the_run_state_names_the_current_run(tmp_path):
    assert read_state(tmp_path) == {} and current_run_dir(tmp_path) is None
    (tmp_path / workdir.STATE_FILE).write_text(json.dumps({"run_id": "20260101-000000", "status": "running"}))
    assert read_state(tmp_path)["status"] == "running"
    assert current_run_dir(tmp_path) == tmp_path / "runs" / "20260101-000000"


def test_every_name_of_the_layout_is_declared_once():
    names = {k: v for k, v in vars(workdir).items() if k.isupper() and isinstance(v, str)}
    assert len(set(names.values())) == len(names), "two names for one file"
    assert names["STATE_FILE"] == "state.json" and names["RETRAIN_FILE"] == "retrain.json"
    assert names["RESULTS_FILE"] == "results.parquet" and names["RUNS_DIR"] == "runs"


class _Section(BaseModel):
    size: int = 2
    where: Annotated[str, Counts(retrain=False)] = "here"
    # added later, with a default that follows `size`
    sizes: Annotated[list[int] | None, Counts(added_later=True)] = None
    keep: Annotated[int, Counts(resume=False, retrain=False)] = 1

    @model_validator(mode="after")
    def _sizes_follow_size(self) -> _Section:
        if self.sizes is None:
            object.__setattr__(self, "sizes", [1, self.size])
        return self


class _Spec(BaseModel):
    name: str = "x"
    section: _Section = _Section()
    optional: Annotated[_Section | None, Counts(resume=False)] = None


def test_a_field_added_later_at_the_value_an_older_spec_gets_is_left_out_of_the_fingerprint():
    assert fingerprint_settings(_Spec(section=_Section(size=3))) == {"name": "x", "section": {"size": 3}, "optional": None}
    # the default follows the other fields: [1, 3] is what a spec with size 3 written before `sizes` gets
    assert fingerprint_settings(_Spec(section=_Section(size=3, sizes=[1, 3]))) == {"name": "x", "section": {"size": 3}, "optional": None}
    # set to anything else, it counts; where it runs never does
    changed = fingerprint_settings(_Spec(section=_Section(size=3, sizes=[1, 2], where="there", keep=5)))
    assert changed == {"name": "x", "section": {"size": 3, "sizes": [1, 2]}, "optional": None}


def test_what_a_resumed_run_may_change_is_read_from_the_markers():
    assert resume_exempt(_Spec) == {"section.keep", "optional"}


# Where a rename is not a write: a whole file moved into a run's own folder (state.py keeps the
# previous run's results) and a damaged cache moved aside before it is deleted (cache.py).
RENAMES_THAT_ARE_MOVES = {"pipeline/search/state.py", "pipeline/prepare/cache.py"}


def test_no_module_but_the_contract_writes_atomically_by_hand():
    """An atomic write is `atomic_write` / `atomic_path` / `atomic_folder`: a module that renames
    a scratch file itself has its own idea of where scratch files go and what a crash leaves."""
    import re

    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"\bos\.(replace|rename)\(|\.rename\(")
    found = sorted(
        f"{path.relative_to(root)}:{n}" for path in (root / "pipeline").rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
        and path.relative_to(root).as_posix() not in RENAMES_THAT_ARE_MOVES | {"pipeline/workdir.py"}
    )
    assert found == []


def test_no_module_but_the_store_computes_an_address():
    """`WorkStore.address` is how any node names a path: a copy of its rule (key_of, then uri)
    drifts from it the day the rule changes."""
    import re

    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"\.uri\(\s*key\s*\)")
    found = sorted(
        f"{path.relative_to(root)}:{n}" for path in (root / "pipeline").rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and path.relative_to(root).as_posix() != "pipeline/storage.py"
    )
    assert found == []


def test_a_trial_key_gives_back_its_configuration_id_even_when_the_method_name_has_dashes():
    """The report's Search section, the recorder and the benchmark read a configuration from a
    row's trial id: `config_id_of` must invert `trial_key` for any method name a plugin may have."""
    from pipeline.workdir import config_id_of, trial_key

    assert trial_key("kd", "1a0d0257", 3) == "kd-1a0d0257-s3"
    for method, cid in [("kd", "1a0d0257"), ("my-kd-s2", "ab-s1"), ("cofi", "")]:
        assert config_id_of(trial_key(method, cid, 12), method) == cid
    assert config_id_of("kd-1a0d0257-s0", "theseus") == ""  # another method's key
