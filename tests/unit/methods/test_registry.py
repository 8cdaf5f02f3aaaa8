"""The method registry (methods/__init__.py): every built-in is listed, a broken one fails loudly."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import methods
from methods import get_declaration, get_method, registered_methods
from methods.base import Method
from methods.declaration import MethodDeclaration

METHODS_DIR = Path(methods.__file__).parent


def test_every_method_file_is_registered_under_its_name():
    found = {}
    for path in sorted(METHODS_DIR.glob("*.py")):
        if path.stem.startswith("_") or path.stem in ("base", "declaration"):
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
        declaration = get_declaration(name)
        assert issubclass(cls, declaration) and not issubclass(declaration, Method)
        assert declaration.__module__ == f"methods.params.{path_stem(cls)}"  # one torch-free file per method
        facts = ("name", "Params", "summary", "implementation", "uses_teacher", "same_modules_on_every_rank", "uses_unlabeled_text",
                 "needs_teacher", "learning_rate_override")
        assert [fact(cls, f) for f in facts] == [fact(declaration, f) for f in facts], name  # none redefined by the Method


def fact(cls: type, name: str) -> object:
    """A declared fact, a classmethod as its function (bound, it names the class it was read from)."""
    value = getattr(cls, name)
    return getattr(value, "__func__", value)


def path_stem(cls: type) -> str:
    return cls.__module__.rpartition(".")[2]


DECLARATIONS_IMPORT = """
import json, sys
import methods
declared = {n: methods.get_declaration(n).Params.__name__ for n in methods.registered_methods()}
print(json.dumps({"declared": declared, "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def test_every_declaration_is_read_without_importing_torch_or_transformers():
    """What `drydock validate` and `drydock plan` read of every built-in: a fresh process that
    loads all seven declarations has imported neither (they took ~5 s of the 6 s a validate took)."""
    out = subprocess.run([sys.executable, "-c", DECLARATIONS_IMPORT], capture_output=True, text=True, check=True,
                         cwd=METHODS_DIR.parent)
    found = json.loads(out.stdout)
    assert found["heavy"] == []
    assert found["declared"] == {"cofi": "CoFiParams", "dcr": "DCRParams", "finetune": "FinetuneParams", "kd": "KDParams",
                                 "minilm": "MiniLMParams", "pkd": "PKDParams", "theseus": "TheseusParams"}


class _Declared(MethodDeclaration):
    name = "declared"
    implementation = "methods.kd:KnowledgeDistillation"  # a Method, but not of this declaration


class _Undeclared(MethodDeclaration):
    name = "undeclared"


def test_get_method_refuses_an_implementation_that_does_not_subclass_its_declaration(monkeypatch):
    """Were the Method free of its declaration, the spec would be validated by one Params model
    and the trial built from another."""
    monkeypatch.setitem(sys.modules, "fake_plugin", type(sys)("fake_plugin"))
    sys.modules["fake_plugin"].Declared = _Declared  # type: ignore[attr-defined]
    sys.modules["fake_plugin"].Undeclared = _Undeclared  # type: ignore[attr-defined]
    monkeypatch.setattr(methods, "_targets", lambda: {"declared": "fake_plugin:Declared", "undeclared": "fake_plugin:Undeclared"})
    get_declaration.cache_clear()
    get_method.cache_clear()
    try:
        assert get_declaration("declared") is _Declared
        with pytest.raises(TypeError, match=r"_Declared.implementation methods.kd:KnowledgeDistillation is not"):
            get_method("declared")
        with pytest.raises(TypeError, match=r"_Undeclared.implementation \(none\) is not"):
            get_method("undeclared")
    finally:
        get_declaration.cache_clear()
        get_method.cache_clear()


def test_a_plugin_method_registered_directly_is_its_own_declaration(monkeypatch):
    """The entry point of a plugin written before declarations existed names its Method: it still
    works, and its declaration is the Method itself."""
    from methods.kd import KnowledgeDistillation

    monkeypatch.setattr(methods, "_targets", lambda: {"kd": "methods.kd:KnowledgeDistillation"})
    get_declaration.cache_clear()
    get_method.cache_clear()
    try:
        assert get_declaration("kd") is KnowledgeDistillation
        assert get_method("kd") is KnowledgeDistillation
    finally:
        get_declaration.cache_clear()
        get_method.cache_clear()


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


def test_a_method_registered_directly_that_asks_for_unlabeled_text_declares_it_without_saying_so():
    """The plan reads `uses_unlabeled_text` from the declaration; a plugin's Method that is its own
    declaration and overrides `unlabeled` gets it (before the split the plan read the override)."""
    from methods.base import UnlabeledRequest
    from methods.kd import KnowledgeDistillation

    class Reads(KnowledgeDistillation):
        def unlabeled(self) -> UnlabeledRequest:
            return UnlabeledRequest()

    class Says(Reads):
        uses_unlabeled_text = False

    assert Reads.uses_unlabeled_text and not KnowledgeDistillation.uses_unlabeled_text and not Says.uses_unlabeled_text


def test_a_plugin_imports_method_from_the_registry_and_the_registry_stays_torch_free():
    out = subprocess.run([sys.executable, "-c", "import sys, methods; t = 'torch' in sys.modules; from methods import Method; "
                          "print(t, Method.__module__)"], capture_output=True, text=True, check=True, cwd=METHODS_DIR.parent)
    assert out.stdout.split() == ["False", "methods.base"]


@pytest.mark.parametrize(("old", "new"), [("methods.kd", "methods.params.kd"), ("methods.theseus", "methods.params.theseus"),
                                          ("methods._replacing", "methods.params.replacing")])
def test_parameters_pickled_before_they_moved_still_load(old, new):
    """A resumable run's Tune and searcher state pickled Params under the method's module
    (`methods.kd.KDParams`) before the declarations moved them: those names must stay importable."""
    import pickle

    from methods.params.kd import KDParams
    from methods.params.replacing import ReplacingParams
    from methods.params.theseus import TheseusParams

    value = {"methods.kd": KDParams(alpha=0.7), "methods.theseus": TheseusParams(base_rate=0.2),
             "methods._replacing": ReplacingParams(num_layers=3)}[old]
    data = pickle.dumps(value, protocol=0)
    assert f"c{new}\n".encode() in data  # protocol 0 names a class as module, newline, name
    loaded = pickle.loads(data.replace(f"c{new}\n".encode(), f"c{old}\n".encode()))
    assert loaded == value and type(loaded) is type(value)

