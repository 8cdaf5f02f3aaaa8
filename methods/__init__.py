"""Method registry: the built-in methods plus any registered under the `drydock.methods`
entry-point group (a third-party package adds `[project.entry-points."drydock.methods"]
mymethod = "mypkg.mymethod:MyMethod"`).

The pipeline reaches methods only through `get_method` / `registered_methods`, so adding a
method never touches pipeline code.
"""

from __future__ import annotations

import importlib
from functools import cache, lru_cache
from importlib.metadata import entry_points

from methods.base import Method

# name -> "module:Class" for every built-in method; imported lazily so `drydock validate` stays
# fast. Listed, not discovered: a built-in that fails to import is an import error, never an
# "unknown method".
_BUILTIN = {
    "finetune": "methods.finetune:Finetune",
    "kd": "methods.kd:KnowledgeDistillation",
    "theseus": "methods.theseus:Theseus",
    "dcr": "methods.dcr:DeterministicContinuousReplacement",
    "pkd": "methods.pkd:PatientKD",
    "minilm": "methods.minilm:MiniLM",
    "cofi": "methods.cofi:CoFi",
}


@lru_cache(maxsize=1)
def _targets() -> dict[str, str]:
    targets = dict(_BUILTIN)
    for ep in entry_points(group="drydock.methods"):
        targets.setdefault(ep.name, ep.value)
    return targets


def registered_methods() -> list[str]:
    return sorted(_targets())


@cache
def get_method(name: str) -> type[Method]:
    targets = _targets()
    if name not in targets:
        raise KeyError(f"unknown method {name!r} (registered: {', '.join(sorted(targets))})")
    module_name, _, attr = targets[name].partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise TypeError(f"{targets[name]} is not a drydock Method subclass")
    return cls


__all__ = ["Method", "get_method", "registered_methods"]
