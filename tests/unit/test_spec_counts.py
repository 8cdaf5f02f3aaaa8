"""Which spec fields count for `--resume` and for `drydock retrain` (the `Counts` markers of
`pipeline.config`, read by `pipeline.workdir`): a spec unchanged keeps the fingerprint its last
successful run recorded, and a run keeps resuming as it did.

The oracle below is the fingerprint as `pipeline.retrain` computed it before the markers: a
frozen copy of the rules it applied, by hand, field by field. It must never change: each
fingerprint a scheduler's retrain.json holds was computed this way."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import LatencyConfig, SelectionConfig, SweepSpec, load_spec, spec_from_dict, spec_to_dict
from pipeline.errors import SpecError
from pipeline.retrain import spec_fingerprint
from pipeline.search.state import RESUME_MAY_DIFFER

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "sweeps").glob("*.yaml"))
OVERRIDES = [
    [],
    ["resources.workers_per_trial=2", "tracking.uri=http://x", "train.keep_checkpoints=3"],
    ["teacher.revision=v2"],
    ["task.hub_revision=abc"],
    ["selection.latency.all_seeds=true"],
    ["selection.latency.accelerator_type=A100"],
    ["selection.latency={device: cpu, batch_size: 8, seq_length: 32}", "selection.runtimes=null"],
    ["selection.latency={device: cpu, batch_size: 8, seq_length: 32}", "selection.runtimes=[torch]"],
    ["selection.latency={device: cuda}"],
    ["selection.latency={device: cuda}", "selection.runtimes=[torch, onnxruntime]"],
    ["selection.latency={shapes: [1x128]}"],
    ["selection.latency={shapes: [1x128, 32x64, 8x16]}"],
    ["selection.latency={front_shape: 1x128}"],
    ["train.learning_rate=0.01"],
]


def fingerprint_before_markers(spec: SweepSpec) -> str:
    settings: dict[str, Any] = spec_to_dict(spec)
    for where in ("resources", "tracking"):
        settings.pop(where, None)
    settings["train"].pop("keep_checkpoints", None)
    if not settings["train"].get("group_by_length"):  # came later (#36); off, the old batches
        settings["train"].pop("group_by_length", None)
    settings["task"].pop("glue_dir", None)
    for split in ("train", "dev", "test"):
        (settings["task"].get("files") or {}).pop(split, None)
    settings["teacher"].pop("finetuned", None)
    if settings["teacher"].get("revision") is None:
        settings["teacher"].pop("revision", None)
    latency = settings.get("selection", {}).get("latency", {})
    latency.pop("accelerator_type", None)
    if not latency.get("all_seeds"):
        latency.pop("all_seeds", None)
    chosen = spec.selection
    default = SelectionConfig(latency=LatencyConfig(device=chosen.latency.device, batch_size=chosen.latency.batch_size,
                                                    seq_length=chosen.latency.seq_length))
    latency.pop("front_shape", None)
    if chosen.latency.shapes == default.latency.shapes:
        latency.pop("shapes", None)
    if chosen.runtimes == default.runtimes:
        settings.get("selection", {}).pop("runtimes", None)
    search = settings["search"]  # a searching algorithm's fields (#34): how it runs, or at the grid's defaults
    search.pop("time_budget", None)
    for key, before in (("algorithm", "grid"), ("num_configurations", None), ("objectives", None), ("warm_start", None)):
        if search.get(key) == before:
            search.pop(key, None)
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_shipped_spec_keeps_its_fingerprint(path, monkeypatch):
    monkeypatch.setenv("GLUE_DIR", "/data/glue")
    seen = set()
    for overrides in OVERRIDES:
        try:
            spec = load_spec(path, overrides)
        except SpecError:  # a revision of a teacher or dataset that has none
            assert any("revision" in o for o in overrides)
            continue
        assert spec_fingerprint(spec) == fingerprint_before_markers(spec), overrides
        seen.add(spec_fingerprint(spec))
    assert len(seen) > 5  # the overrides that change the study change the fingerprint


def test_a_spec_with_files_keeps_its_fingerprint_wherever_its_files_lie():
    raw = {"name": "f", "task": {"name": "custom", "source": "files", "text_columns": ["text"], "num_labels": 2,
                                 "files": {"train": "/a/train.csv", "dev": "/a/dev.csv", "format": "csv"}},
           "teacher": {"model": "bert-base-uncased", "finetuned": "/a/teacher"}, "methods": {"finetune": {}}}
    spec = spec_from_dict(raw)
    assert spec_fingerprint(spec) == fingerprint_before_markers(spec)
    moved = spec_from_dict(raw, ["task.files.train=/b/train.csv", "task.files.dev=/b/dev.csv", "teacher.finetuned=/b/t"])
    assert spec_fingerprint(moved) == spec_fingerprint(spec)
    assert spec_fingerprint(spec_from_dict(raw, ["task.files.format=tsv"])) != spec_fingerprint(spec)


def test_what_a_resumed_run_may_be_given_differently_is_declared_on_the_fields():
    exempt = RESUME_MAY_DIFFER
    assert {"resources", "train.keep_checkpoints", "teacher.revision", "task.hub_revision"} <= exempt
    assert not exempt & {"tracking", "task.glue_dir", "train.epochs", "selection.runtimes", "teacher.finetuned"}
