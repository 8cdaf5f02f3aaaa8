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
