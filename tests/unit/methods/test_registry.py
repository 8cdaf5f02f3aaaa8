"""The method registry (methods/__init__.py): every built-in is listed, a broken one fails loudly."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

import methods
from methods import get_method, registered_methods
from methods.base import Method

METHODS_DIR = Path(methods.__file__).parent


def test_every_method_file_is_registered_under_its_name():
    found = {}
    for path in sorted(METHODS_DIR.glob("*.py")):
        if path.stem.startswith("_") or path.stem == "base":
            continue
        module = importlib.import_module(f"methods.{path.stem}")
        own = [c for c in vars(module).values()
               if isinstance(c, type) and issubclass(c, Method) and c.__module__ == module.__name__]
        assert own, f"methods/{path.name} defines no Method"
        found.update({cls.name: cls for cls in own})
    assert sorted(found) == sorted(methods._BUILTIN)  # a new method file needs its line in the registry
    assert {"finetune", "kd", "theseus", "dcr", "pkd", "minilm", "cofi"} <= set(found)
    for name, cls in found.items():
        assert get_method(name) is cls


def test_a_built_in_that_cannot_be_imported_is_an_import_error_not_an_unknown_method(monkeypatch):
    real_import = importlib.import_module

    def broken(name, *args):
        if name == "methods.cofi":
            raise ModuleNotFoundError("No module named 'methods.cofi'", name=name)
        return real_import(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", lambda *a, **k: None)  # how a broken install looks
    monkeypatch.setattr(importlib, "import_module", broken)
    methods._targets.cache_clear()
    get_method.cache_clear()
    try:
        assert "cofi" in registered_methods()
        with pytest.raises(ModuleNotFoundError, match="methods.cofi"):
            get_method("cofi")
    finally:
        methods._targets.cache_clear()
        get_method.cache_clear()
