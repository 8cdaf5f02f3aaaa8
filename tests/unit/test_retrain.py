"""retrain's building blocks: the per-spec lock and the fingerprints that decide "nothing to do"."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import load_spec
from pipeline.lock import Locked, spec_lock
from pipeline.retrain import fingerprints

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_holder_of_the_lock_is_refused_and_the_lock_is_released(tmp_path):
    with spec_lock(tmp_path, "drydock retrain smoke"):
        with pytest.raises(Locked, match=r"holds its lock: drydock retrain smoke, pid \d+ on .+, since \d{4}-"):
            with spec_lock(tmp_path, "drydock sweep smoke"):
                pass
    with spec_lock(tmp_path, "drydock sweep smoke"):  # free again once the first holder left
        pass


def test_fingerprints_change_with_data_and_settings_but_not_with_where_it_runs(tmp_path):
    base = fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml"), tmp_path)
    assert base == fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml"), tmp_path)
    moved = fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml", ["resources.workers_per_trial=2", "tracking.uri=http://x"]), tmp_path)
    assert moved == base
    more_data = fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml", ["task.synthetic.num_train=256"]), tmp_path)
    assert more_data["data"] != base["data"] and more_data["teacher"] != base["teacher"]
    other_lr = fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml", ["train.learning_rate=0.01"]), tmp_path)
    assert other_lr["spec"] != base["spec"] and other_lr["data"] == base["data"] and other_lr["teacher"] == base["teacher"]


def _model_folder(path: Path, weights: bytes) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text('{"model_type": "bert"}')
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_a_teacher_is_fingerprinted_by_its_files_and_training_settings_not_its_path(tmp_path):
    smoke = ROOT / "sweeps" / "smoke.yaml"
    given = _model_folder(tmp_path / "given", b"weights v1")
    base = fingerprints(load_spec(smoke, [f"teacher.finetuned={given}"]), tmp_path)
    # the same files elsewhere are the same teacher; refreshed in place, another one
    copy = _model_folder(tmp_path / "elsewhere", b"weights v1")
    assert fingerprints(load_spec(smoke, [f"teacher.finetuned={copy}"]), tmp_path) == base
    (given / "model.safetensors").write_bytes(b"weights v2")
    refreshed = fingerprints(load_spec(smoke, [f"teacher.finetuned={given}"]), tmp_path)
    assert refreshed["teacher"] != base["teacher"] and refreshed["spec"] == base["spec"]

    # a pretrained checkpoint in a local folder, fine-tuned by the sweep: its files are in the key
    model = _model_folder(tmp_path / "pretrained", b"v1")
    local = [f"teacher.model={model}", "teacher.architecture=null"]
    first = fingerprints(load_spec(smoke, local), tmp_path)["teacher"]
    (model / "model.safetensors").write_bytes(b"v2")
    assert fingerprints(load_spec(smoke, local), tmp_path)["teacher"] != first
    # the teacher trains with train.max_grad_norm too; at its default the key is the old one
    plain = fingerprints(load_spec(smoke), tmp_path)["teacher"]
    assert fingerprints(load_spec(smoke, ["train.max_grad_norm=1.0"]), tmp_path)["teacher"] == plain
    assert fingerprints(load_spec(smoke, ["train.max_grad_norm=0.5"]), tmp_path)["teacher"] != plain
    # and with train.group_by_length: off (its default), the key and the spec's are the old ones
    off = fingerprints(load_spec(smoke, ["train.group_by_length=false"]), tmp_path)
    on = fingerprints(load_spec(smoke, ["train.group_by_length=true"]), tmp_path)
    assert off["teacher"] == plain and on["teacher"] != plain
    assert off["spec"] == fingerprints(load_spec(smoke), tmp_path)["spec"] != on["spec"]


def test_where_the_data_lies_is_not_a_change(tmp_path, glue_dir):
    rte = glue_dir / "RTE"
    mounts = []
    for mount in ("a", "b"):
        folder = tmp_path / mount / "RTE"
        folder.mkdir(parents=True)
        for split in ("train", "dev"):
            (folder / f"{split}.tsv").write_bytes((rte / f"{split}.tsv").read_bytes())
        mounts.append(tmp_path / mount)
    common = ["task.name=rte", "task.source=glue_dir", "task.max_train_samples=64", "task.max_eval_samples=32"]
    a, b = (fingerprints(load_spec(ROOT / "sweeps" / "smoke.yaml", [*common, f"task.glue_dir={m}"]), tmp_path) for m in mounts)
    assert a == b


def test_how_many_checkpoints_a_trial_keeps_is_not_a_change(tmp_path):
    smoke = ROOT / "sweeps" / "smoke.yaml"
    assert fingerprints(load_spec(smoke, ["train.keep_checkpoints=3"]), tmp_path) == fingerprints(load_spec(smoke), tmp_path)


def test_the_runtime_variants_fields_at_their_defaults_keep_a_specs_fingerprint(tmp_path):
    """A spec that leaves selection.runtimes and selection.latency.shapes to their defaults hashes
    as it did before those fields existed: a scheduled retrain does not rerun a sweep for an upgrade."""
    import hashlib
    import json

    from pipeline.config import spec_to_dict

    smoke = ROOT / "sweeps" / "smoke.yaml"
    spec = load_spec(smoke, ["selection.latency={device: cpu, batch_size: 8, seq_length: 32}", "selection.runtimes=null"])
    assert spec.selection.runtimes == ["torch", "onnxruntime-int8"] and len(spec.selection.latency.shapes) == 3
    before = spec_to_dict(spec)  # what the fingerprint hashed before the fields existed
    for where in ("resources", "tracking"):
        before.pop(where)
    before["train"].pop("keep_checkpoints")
    before["train"].pop("group_by_length")  # came later too, at its default
    before["task"].pop("glue_dir", None)
    before["teacher"].pop("finetuned", None)
    before["teacher"].pop("revision", None)
    latency = before["selection"]["latency"]
    for key in ("accelerator_type", "all_seeds", "shapes", "front_shape"):
        latency.pop(key, None)
    before["selection"].pop("runtimes")
    for key in ("algorithm", "num_configurations", "time_budget", "objectives", "warm_start"):  # #34's, at their defaults
        before["search"].pop(key)
    old = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
    assert fingerprints(spec, tmp_path)["spec"] == old
    # set to something else, they are a change
    other = load_spec(smoke, ["selection.latency={device: cpu, batch_size: 8, seq_length: 32}", "selection.runtimes=[torch]"])
    assert fingerprints(other, tmp_path)["spec"] != old
