"""The student pyfunc: a folder's custom code runs only when it is the code recorded at
registration (the registry's `code_sha256`), before anything imports it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pipeline.measure.student_pyfunc import CodeMismatch, WeightsMismatch, check_code, check_weights

CODE = "class Pruned: pass\n"


def folder_with_code(root: Path) -> Path:
    (root / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "_pruned_bert.PrunedModel"}}))
    (root / "_pruned_bert.py").write_text(CODE)
    return root


def test_a_stock_folder_needs_no_remote_code(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert check_code(tmp_path, None) is False


def test_custom_code_runs_only_when_it_is_the_recorded_code(tmp_path):
    folder = folder_with_code(tmp_path)
    recorded = {"_pruned_bert.py": hashlib.sha256(CODE.encode()).hexdigest()}
    assert check_code(folder, recorded) is True
    with pytest.raises(CodeMismatch, match="records no digest"):
        check_code(folder, None)
    with pytest.raises(CodeMismatch, match="was expected"):
        check_code(folder, recorded, expected="0" * 64)
    (folder / "_pruned_bert.py").write_text(CODE + "import os\n")
    with pytest.raises(CodeMismatch, match="refusing to load code"):
        check_code(folder, recorded)


def test_code_named_from_another_repository_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "someone/repo--model.Model"}}))
    with pytest.raises(CodeMismatch, match="another repository"):
        check_code(tmp_path, {})



def test_weights_load_only_when_they_are_the_recorded_ones(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    recorded = {"model.safetensors": hashlib.sha256(b"weights").hexdigest()}
    check_weights(tmp_path, recorded)
    check_weights(tmp_path, None)  # a model logged before weights were recorded: not checked
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(WeightsMismatch, match=r"model.safetensors: SHA-256 [0-9a-f]{64}, but [0-9a-f]{64} was recorded"):
        check_weights(tmp_path, recorded)
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "extra.safetensors").write_bytes(b"x")
    with pytest.raises(WeightsMismatch, match=r"extra.safetensors: SHA-256 [0-9a-f]{64}, but \(not recorded\)"):
        check_weights(tmp_path, recorded)
