"""Method registry: the built-in methods plus any registered under the `drydock.methods`
entry-point group (a third-party package adds `[project.entry-points."drydock.methods"]
mymethod = "mypkg.mymethod:MyMethod"`, or a torch-free `MethodDeclaration` whose
`implementation` names the Method, so that validating a spec that uses it imports no torch).

The pipeline reaches methods only through `get_declaration` (before any trial) / `get_method`
(a trial) / `registered_methods`, so adding a method never touches pipeline code.
"""

from __future__ import annotations

import importlib
from functools import cache, lru_cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from methods.declaration import MethodDeclaration

if TYPE_CHECKING:
    from methods.base import Method

# name -> "module:Declaration" for every built-in method: torch-free modules, so `drydock
# validate` and `drydock plan` import no torch (`methods/declaration.py`); each declaration names
# its Method, which `get_method` imports. Listed, not discovered: a built-in that fails to import
# is an import error, never an "unknown method".
_BUILTIN = {
    "finetune": "methods.params.finetune:FinetuneDeclaration",
    "kd": "methods.params.kd:KDDeclaration",
    "theseus": "methods.params.theseus:TheseusDeclaration",
    "dcr": "methods.params.dcr:DCRDeclaration",
    "pkd": "methods.params.pkd:PKDDeclaration",
    "minilm": "methods.params.minilm:MiniLMDeclaration",
    "cofi": "methods.params.cofi:CoFiDeclaration",
}


@lru_cache(maxsize=1)
def _targets() -> dict[str, str]:
    targets = dict(_BUILTIN)
    for ep in entry_points(group="drydock.methods"):
        targets.setdefault(ep.name, ep.value)
    return targets


def registered_methods() -> list[str]:
    return sorted(_targets())


def _attribute(target: str) -> object:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@cache
def get_declaration(name: str) -> type[MethodDeclaration]:
    """What the spec, the plan and the model card read of a method: for the built-ins, and for a
    plugin that registers a declaration, without importing torch."""
    targets = _targets()
    if name not in targets:
        raise KeyError(f"unknown method {name!r} (registered: {', '.join(sorted(targets))})")
    cls = _attribute(targets[name])
    if not (isinstance(cls, type) and issubclass(cls, MethodDeclaration)):
        raise TypeError(f"{targets[name]} is not a drydock MethodDeclaration or Method subclass")
    return cls


@cache
def get_method(name: str) -> type[Method]:
    """The method a trial trains: the declaration itself when it is a Method, else the Method
    its `implementation` names, which must subclass it (so the two agree on every fact)."""
    from methods.base import Method

    declaration = get_declaration(name)
    if issubclass(declaration, Method):
        return declaration
    target = declaration.implementation or "(none)"
    cls = _attribute(declaration.implementation) if declaration.implementation else None
    if not (isinstance(cls, type) and issubclass(cls, Method) and issubclass(cls, declaration)):
        raise TypeError(f"{declaration.__module__}.{declaration.__name__}.implementation {target} is not a drydock Method "
                        f"subclassing that declaration")
    return cls


def __getattr__(name: str) -> object:
    """`from methods import Method` (a plugin's import) without importing torch with the registry."""
    if name == "Method":
        from methods.base import Method

        return Method
    raise AttributeError(f"module 'methods' has no attribute {name!r}")


__all__ = ["Method", "MethodDeclaration", "get_declaration", "get_method", "registered_methods"]
