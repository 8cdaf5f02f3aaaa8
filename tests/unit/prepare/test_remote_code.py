"""The record of an export's code: each .py file's SHA-256, one digest of them all, and the files
a folder's configs would make `trust_remote_code=True` import."""

from __future__ import annotations

import hashlib
import json

import pytest

from pipeline.errors import DrydockError
from pipeline.prepare.remote_code import CODE_DIGEST_KEY, CODE_FILES_KEY, code_record, combined_digest, named_code


def test_the_record_holds_every_py_file_and_their_sha256sum_style_digest(tmp_path):
    (tmp_path / "modeling.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "util.py").write_text("y = 2\n")
    (tmp_path / "weights.bin").write_bytes(b"\0")
    files = {"modeling.py": hashlib.sha256(b"x = 1\n").hexdigest(), "sub/util.py": hashlib.sha256(b"y = 2\n").hexdigest()}
    lines = f"{files['modeling.py']}  modeling.py\n{files['sub/util.py']}  sub/util.py\n"
    assert code_record(tmp_path) == {CODE_FILES_KEY: files, CODE_DIGEST_KEY: hashlib.sha256(lines.encode()).hexdigest()}
    assert combined_digest(files) == code_record(tmp_path)[CODE_DIGEST_KEY]


def test_a_folder_without_code_records_nothing(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert code_record(tmp_path) == {} and named_code(tmp_path) == []


def test_the_configs_name_the_code_they_import_and_code_of_another_repository_is_refused(tmp_path):
    auto_map = {"AutoConfig": "configuration_pruned.PrunedConfig", "AutoModelForSequenceClassification": "modeling_pruned.Model"}
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": auto_map}))
    assert named_code(tmp_path) == ["configuration_pruned.py", "modeling_pruned.py"]
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "other/repo--modeling.Model"}}))
    with pytest.raises(DrydockError, match="names code from another repository"):
        named_code(tmp_path)


def test_weights_copied_in_from_another_student_are_refused_by_every_loader(tmp_path, tiny_tokenizer):
    """drydock.json records the SHA-256 of each weights file; `remote_code`, which every loader
    asks first (the export's check, latency, the registry, `drydock eval`), refuses a folder whose
    `model.safetensors` is another model's, or has a weights file added or taken away."""
    import json
    import shutil

    import pytest
    from safetensors.torch import load_file, save_file

    from pipeline.errors import DrydockError
    from pipeline.prepare.remote_code import WEIGHTS_FILES_KEY, remote_code
    from pipeline.select.evaluate import load_predictor
    from tests.unit.prepare.test_model_card import cofi_export, stock_export

    one, _ = stock_export(tmp_path / "one", tiny_tokenizer)
    other = tmp_path / "other"  # another student of the same shape: its weights moved a little
    other.mkdir()
    weights = load_file(one / "model.safetensors")
    save_file({name: t + 0.01 for name, t in weights.items()}, other / "model.safetensors", metadata={"format": "pt"})
    recorded = json.loads((one / "drydock.json").read_text())[WEIGHTS_FILES_KEY]
    assert list(recorded) == ["model.safetensors"] and len(recorded["model.safetensors"]) == 64
    assert remote_code(one) is False  # as exported: loads

    shutil.copyfile(other / "model.safetensors", one / "model.safetensors")
    with pytest.raises(DrydockError, match=r"one/model.safetensors: this weights file has SHA-256 \w+, but \w+ was recorded"):
        remote_code(one)
    with pytest.raises(DrydockError, match=r"not the exported ones"):
        load_predictor(str(one), max_length=None)  # `drydock eval` of the folder
    (one / "model.safetensors").unlink()
    with pytest.raises(DrydockError, match=r"model.safetensors: this weights file is missing"):
        remote_code(one)
    cofi = cofi_export(tmp_path / "cofi", tiny_tokenizer)
    assert remote_code(cofi) is True
    shutil.copyfile(other / "model.safetensors", cofi / "extra.safetensors")
    with pytest.raises(DrydockError, match=r"extra.safetensors: this weights file is not recorded"):
        remote_code(cofi)


def test_a_weights_file_is_hashed_once_while_it_is_unchanged_and_again_after_a_same_size_rewrite(tmp_path, monkeypatch):
    """Every loader checks the weights (latency, the engines, the registry, export's reload), so a
    file is hashed once per content, not once per load; a rewrite of the same size (another
    student of the same architecture copied over it) is hashed again and refused."""
    from pipeline.prepare import remote_code
    from pipeline.prepare.remote_code import METADATA_FILE, check_weights, weights_record

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 1000)
    (tmp_path / METADATA_FILE).write_text(json.dumps(weights_record(tmp_path)))
    hashed: list[str] = []
    monkeypatch.setattr(remote_code, "file_sha256", lambda path, real=remote_code.file_sha256: hashed.append(path) or real(path))
    check_weights(tmp_path)
    check_weights(tmp_path)
    assert len(hashed) == 2  # written just now: not remembered, it may change again within its timestamps' granularity
    monkeypatch.setattr(remote_code, "RACY_S", -1e9)  # as for a file written long before (a ctime cannot be set back)
    for _ in range(3):
        check_weights(tmp_path)
    assert len(hashed) == 3  # hashed once more, then remembered
    weights.write_bytes(b"b" * 1000)
    with pytest.raises(DrydockError, match="model.safetensors: this weights file has SHA-256"):
        check_weights(tmp_path)
