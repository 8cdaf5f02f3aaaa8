"""The runtime table (`pipeline.measure.runtimes`): the one place runtime names are written, and
what the spec, the engines, the registry and the report derive from it."""

from __future__ import annotations

import ast
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.config import DEFAULT_RUNTIMES, RuntimeName, SelectionConfig
from pipeline.measure import runtimes

ROOT = Path(__file__).resolve().parents[3]
HOME = ROOT / "pipeline" / "measure" / "runtimes.py"
SEARCHED = ("pipeline", "methods", "benchmarks")


def spelled_lists(source: str, names: set[str]) -> list[int]:
    """Lines where a list, tuple, set or subscript (`Literal[...]`) spells two or more runtime names."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        elements = node.elts if isinstance(node, ast.List | ast.Tuple | ast.Set) else None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
            elements = node.slice.elts
        if elements is None:
            continue
        spelled = {e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)} & names
        if len(spelled) >= 2:
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_other_module_spells_the_runtime_names_as_a_list():
    names = set(runtimes.NAMES)
    found = [f"{path.relative_to(ROOT)}:{line}" for folder in SEARCHED for path in sorted((ROOT / folder).rglob("*.py"))
             if path != HOME for line in spelled_lists(path.read_text(), names)]
    assert found == []
    assert spelled_lists(HOME.read_text(), names) != []  # the table itself spells them, once


def test_a_spelled_list_is_found():
    names = set(runtimes.NAMES)
    source = ('R = Literal["torch", "onnxruntime"]\nD = {"cpu": ("torch", "onnxruntime-int8")}\n'
              'X = ["torch"]\nV = {"torch": 1, "torch-fp16": 2}\n')
    assert spelled_lists(source, names) == [1, 2]


def test_the_spec_takes_the_tables_names_and_defaults():
    assert typing.get_args(RuntimeName) == runtimes.NAMES == tuple(runtimes.RUNTIMES)
    assert DEFAULT_RUNTIMES == {"cpu": ("torch", "onnxruntime-int8"), "cuda": ("torch", "torch-fp16")}
    assert SelectionConfig(runtimes=list(runtimes.NAMES)).runtimes == list(runtimes.NAMES)
    with pytest.raises(ValidationError):
        SelectionConfig.model_validate({"runtimes": ["onnx"]})


def test_what_each_runtime_knows():
    assert runtimes.TORCH_DTYPES == {"torch": "float32", "torch-fp16": "float16", "torch-bf16": "bfloat16"}
    assert runtimes.HALF_RUNTIMES == ("torch-fp16", "torch-bf16")
    assert runtimes.CPU_RUNTIMES == ("torch", "onnxruntime", "onnxruntime-int8")
    assert runtimes.ONNX_RUNTIMES == ("onnxruntime", "onnxruntime-int8")
    assert runtimes.TOLERANCES == {"torch": 1e-4, "onnxruntime": 1e-3, "onnxruntime-int8": 0.75, "torch-fp16": 2e-2,
                                   "torch-bf16": 0.15}
    assert {name: r.serving for name, r in runtimes.RUNTIMES.items()} == {
        "torch": "eager", "onnxruntime": "onnx", "onnxruntime-int8": "onnx", "torch-fp16": "cast", "torch-bf16": "cast"}
    assert [runtimes.label(name) for name in (runtimes.EAGER, runtimes.QUANTIZED, "torch-bf16", "elsewhere")] == [
        "fp32", "int8", "bf16", "elsewhere"]
    assert {name: runtimes.pyfunc_module(name).name for name in runtimes.NAMES} == {
        "torch": "student_pyfunc.py", "onnxruntime": "onnx_pyfunc.py", "onnxruntime-int8": "onnx_pyfunc.py",
        "torch-fp16": "student_pyfunc.py", "torch-bf16": "student_pyfunc.py"}
    assert all(runtimes.pyfunc_module(name).is_file() for name in runtimes.NAMES)
    with pytest.raises(KeyError, match="known: torch, onnxruntime"):
        runtimes.runtime("onnx")


def test_the_spec_reads_the_table_without_torch_or_onnx():
    """`pipeline.config` imports the table at import time: it must stay cheap."""
    code = ("import sys, pipeline.config\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'onnx', 'onnxruntime', 'scipy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.stdout.strip() == "[]"
