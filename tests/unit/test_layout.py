"""The rules of the layout (docs/layout.md), checked on the real tree, and shown to fail.

Each rule is a pure function of an import graph (module → the modules and names it imports,
read from the source with `ast`, function-level imports included), so the same function runs on
the tree and on a small made-up graph that breaks the rule: a rule that cannot fail is no rule.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("drydock", "pipeline", "methods")

# The rooms of the house and what each may import (docs/layout.md). A module's room is its
# subpackage (pipeline.prepare.data → "prepare"), else its own top-level name.
ROOMS_ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "lock": set(),  # one run of a spec at a time: the lock `drydock sweep` and `drydock retrain` share
    "storage": {"errors"},  # the work location (a folder or a URI): every stage that hands work on
    # method parameters are validated through the registry, runtime names through the runtime table
    # (CONFIG_FROM_MEASURE: that module only)
    "config": {"errors", "methods", "measure"},
    "results": {"errors", "config"},
    "tracking": {"errors", "storage", "config", "results"},
    "prepare": {"errors", "config", "methods"},  # methods.base's TaskInfo only (see METHODS_PUBLIC)
    "training": {"errors", "config", "prepare", "methods"},
    "search": {"errors", "storage", "config", "prepare", "training", "measure", "tracking", "results", "methods"},
    "measure": {"errors", "storage", "config", "prepare"},  # never select: it chooses from what measure measured
    "select": {"errors", "storage", "config", "prepare", "measure", "results", "tracking", "methods"},
    "sweep": {"errors", "storage", "config", "prepare", "training", "search", "measure", "select", "tracking", "results", "methods"},
    "retrain": {"errors", "lock", "storage", "config", "prepare", "training", "measure", "select", "sweep", "tracking", "methods"},
    "cli": {"errors", "lock", "storage", "config", "prepare", "training", "search", "measure", "select", "tracking", "results", "sweep",
            "retrain", "methods", "api"},
    # the Python API (the `drydock` package): a thin facade over the stages; the command calls it and prints
    "api": {"errors", "lock", "storage", "config", "prepare", "training", "search", "measure", "select", "tracking", "results", "sweep",
            "retrain", "methods", "cli"},
    "methods": {"methods"},
}
# The work location's contract (`pipeline/workdir.py`: the names of what a sweep writes, atomic
# writes, the markers of what a spec's fields count for) imports nothing of drydock, and every
# room that writes files, or declares the spec, uses it.
ROOMS_ALLOWED["workdir"] = set()
for _room in ("lock", "storage", "config", "results", "tracking", "prepare", "training", "search", "measure", "select", "sweep", "retrain",
              "cli", "api"):
    ROOMS_ALLOWED[_room].add("workdir")
# What the pipeline may import from methods/: the registry and the contract (the torch-free
# declaration and the Method's base), never a method's file or its declaration's (a method is
# reached by name) nor a private helper module.
METHODS_PUBLIC = {"methods", "methods.base", "methods.declaration"}
# What the spec schema may import from measure: the runtime table, which imports nothing heavy.
CONFIG_FROM_MEASURE = {"pipeline.measure.runtimes"}
# The spec's package is reached through its face: every other room imports `pipeline.config`,
# never one of its modules (which split it by concern, and may move within it).
SPEC_FACE = "pipeline.config"
# What methods/ never imports: processes, trackers and file coordination are the pipeline's.
METHODS_FORBIDDEN = ("ray", "mlflow", "deepspeed", "torch.distributed", "torch.nn.parallel", "torch.multiprocessing",
                     "fcntl", "filelock", "multiprocessing", "subprocess")
# What the rooms that run inside one trial's process never import: Ray and MLflow are the search
# stage's and the select stage's (a trial reports through a Reporter, `pipeline/training/loop.py`).
IN_PROCESS_ROOMS = ("prepare", "training")
IN_PROCESS_FORBIDDEN = ("ray", "mlflow")
MAX_FUNCTION_LINES = 80


@dataclass(frozen=True)
class Import:
    module: str  # the module imported, resolved to a module of the tree where it is one
    names: tuple[str, ...]  # names taken from it (`from m import a, b`), empty for `import m`
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module a `from` import names, relative imports (`from .loop import run`) resolved."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def read_tree() -> tuple[dict[str, list[Import]], dict[str, Path]]:
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, list[Import]] = {}
    for name, path in files.items():
        imports = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imports += [Import(a.name, (), node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = absolute(name, path.name == "__init__.py", node)
                names = tuple(a.name for a in node.names)
                # `from pipeline.training import loop` imports the module pipeline.training.loop
                submodules = [n for n in names if f"{source}.{n}" in files]
                imports += [Import(f"{source}.{n}", (), node.lineno) for n in submodules]
                rest = tuple(n for n in names if n not in submodules)
                if rest or not submodules:
                    imports.append(Import(source, rest, node.lineno))
        graph[name] = imports
    return graph, files


def internal(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "methods":
        return "methods"
    if parts[0] == "drydock":
        return "api"
    return parts[1] if len(parts) > 1 else "pipeline"


def cycles(graph: dict[str, list[Import]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), plus self-imports."""
    edges = {m: sorted({i.module for i in imps if i.module in graph and i.module != m}) for m, imps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def room_violations(graph: dict[str, list[Import]]) -> list[str]:
    out = []
    for module, imports in graph.items():
        mine = room(module)
        allowed = ROOMS_ALLOWED.get(mine, set()) | {mine}
        for imp in imports:
            if not internal(imp.module) or imp.module in ("pipeline",):
                continue
            theirs = room(imp.module)
            if theirs not in allowed:
                out.append(f"{module}:{imp.line} ({mine}) imports {imp.module} ({theirs})")
            elif mine != "methods" and theirs == "methods" and imp.module not in METHODS_PUBLIC:
                out.append(f"{module}:{imp.line} imports {imp.module}: reach methods through the registry or methods.base")
            elif mine == "config" and theirs == "measure" and imp.module not in CONFIG_FROM_MEASURE:
                out.append(f"{module}:{imp.line} imports {imp.module}: the spec reaches measure through its runtime table only")
    return out


def past_the_face(graph: dict[str, list[Import]]) -> list[str]:
    """A module outside the spec's package that imports one of its modules (`pipeline.config.schema`)."""
    return [f"{module}:{imp.line} imports {imp.module}: import it from {SPEC_FACE}"
            for module, imports in graph.items() if not (module == SPEC_FACE or module.startswith(SPEC_FACE + "."))
            for imp in imports if imp.module.startswith(SPEC_FACE + ".")]


def private_imports(graph: dict[str, list[Import]]) -> list[str]:
    """`from m import _name` of another module, or a `_module` from outside its package."""
    out = []
    for module, imports in graph.items():
        for imp in imports:
            if not internal(imp.module) or imp.module == module:
                continue
            private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
            if private:
                out.append(f"{module}:{imp.line} imports {', '.join(private)} from {imp.module}")
            parts = imp.module.split(".")
            for depth, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    package = ".".join(parts[:depth])
                    if not (module == package or module.startswith(package + ".")):
                        out.append(f"{module}:{imp.line} imports the private module {imp.module}")
    return out


def _is(module: str, forbidden: tuple[str, ...]) -> bool:
    return any(module == f or module.startswith(f + ".") for f in forbidden)


def forbidden_in_methods(graph: dict[str, list[Import]]) -> list[str]:
    return [f"{module}:{imp.line} imports {imp.module}"
            for module, imports in graph.items() if room(module) == "methods"
            for imp in imports
            if _is(imp.module, METHODS_FORBIDDEN) or (imp.module == "torch" and "distributed" in imp.names)]


def distributed_attributes(files: dict[str, Path]) -> list[str]:
    """`torch.distributed.…` reached through a plain `import torch` in methods/."""
    out = []
    for name, path in files.items():
        if room(name) != "methods":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "distributed"
                    and isinstance(node.value, ast.Name) and node.value.id == "torch"):
                out.append(f"{name}:{node.lineno} uses torch.distributed")
    return out


def forbidden_in_process(graph: dict[str, list[Import]]) -> list[str]:
    return [f"{module}:{imp.line} imports {imp.module}"
            for module, imports in graph.items() if room(module) in IN_PROCESS_ROOMS
            for imp in imports if _is(imp.module, IN_PROCESS_FORBIDDEN)]


def long_functions(files: dict[str, Path]) -> list[str]:
    out = []
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{name}.{node.name}: {length} lines")
    return out


# ----------------------------------------------------------------------------------------------
# the real tree
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree():
    return read_tree()


def test_the_import_graph_has_no_cycle(tree):
    assert cycles(tree[0]) == []


def test_each_room_imports_only_what_its_row_allows(tree):
    assert room_violations(tree[0]) == []


def test_the_spec_is_imported_through_its_face(tree):
    assert past_the_face(tree[0]) == []


def test_no_module_imports_another_modules_private_names(tree):
    assert private_imports(tree[0]) == []


def test_methods_know_no_processes_trackers_or_file_locks(tree):
    assert forbidden_in_methods(tree[0]) == []
    assert distributed_attributes(tree[1]) == []


def test_prepare_and_training_know_neither_ray_nor_mlflow(tree):
    assert forbidden_in_process(tree[0]) == []


def test_no_function_is_longer_than_80_lines(tree):
    assert long_functions(tree[1]) == []


def test_every_stage_folder_exists_and_the_top_level_holds_only_contracts(tree):
    top = {m for m in tree[1] if m.count(".") == 1 and m.startswith("pipeline.") and not (ROOT / m.replace(".", "/")).is_dir()}
    assert top == {"pipeline.errors", "pipeline.results", "pipeline.tracking", "pipeline.sweep", "pipeline.retrain",
                   "pipeline.storage", "pipeline.lock", "pipeline.workdir"}
    # the spec is a contract too, split by concern in a package of its own (SPEC_FACE)
    assert (ROOT / "pipeline" / "config" / "__init__.py").is_file() and (ROOT / "tests" / "unit" / "config").is_dir()
    for stage in ("prepare", "training", "search", "measure", "select", "cli"):
        assert (ROOT / "pipeline" / stage / "__init__.py").is_file()
        assert (ROOT / "tests" / "unit" / stage).is_dir() or (ROOT / "tests" / "integration" / stage).is_dir()


# ----------------------------------------------------------------------------------------------
# each rule fails where it should
# ----------------------------------------------------------------------------------------------


def _graph(edges: dict[str, list[tuple[str, tuple[str, ...]]]]) -> dict[str, list[Import]]:
    return {m: [Import(target, names, 1) for target, names in imps] for m, imps in edges.items()}


def test_a_cycle_is_found():
    graph = _graph({
        "pipeline.search.driver": [("pipeline.search.worker", ())],
        "pipeline.search.worker": [("pipeline.search.driver", ("write_outcome",))],
        "pipeline.search.space": [],
    })
    assert cycles(graph) == [["pipeline.search.driver", "pipeline.search.worker"]]
    graph.update(_graph({"pipeline.search.worker": [("pipeline.search.outcome", ("write_outcome",))], "pipeline.search.outcome": []}))
    assert cycles(graph) == []


def test_an_upward_import_is_found():
    graph = _graph({
        "pipeline.training.loop": [("pipeline.search.relay", ("ReportRelay",)), ("pipeline.prepare.metrics", ("compute_metrics",))],
        "pipeline.prepare.data": [("pipeline.training.loop", ("collate",))],
        "pipeline.training.trial": [("methods.finetune", ("Finetune",)), ("methods", ("get_method",))],
        "pipeline.config": [("pipeline.select.latency", ())],
    })
    assert room_violations(graph) == [
        "pipeline.training.loop:1 (training) imports pipeline.search.relay (search)",
        "pipeline.prepare.data:1 (prepare) imports pipeline.training.loop (training)",
        "pipeline.training.trial:1 imports methods.finetune: reach methods through the registry or methods.base",
        "pipeline.config:1 (config) imports pipeline.select.latency (select)",
    ]


def test_measure_never_imports_select_and_the_spec_reaches_only_its_runtime_table():
    graph = _graph({
        "pipeline.measure.job": [("pipeline.select.variants", ("variant_rows",)), ("pipeline.config", ("SweepSpec",))],
        "pipeline.select.stage": [("pipeline.measure.latency", ("measure_all",))],
        "pipeline.config": [("pipeline.measure.runtimes", ("RuntimeName",)), ("pipeline.measure.engines", ("build_variant",))],
    })
    assert room_violations(graph) == [
        "pipeline.measure.job:1 (measure) imports pipeline.select.variants (select)",
        "pipeline.config:1 imports pipeline.measure.engines: the spec reaches measure through its runtime table only",
    ]


def test_a_module_of_the_spec_reached_past_its_face_is_found():
    graph = _graph({
        "pipeline.search.space": [("pipeline.config.domains", ("Grid",)), ("pipeline.config", ("SweepSpec",))],
        "pipeline.cli.main": [("pipeline.config.loader", ())],
        "pipeline.config.loader": [("pipeline.config.schema", ("SweepSpec",))],  # inside the package: fine
        "pipeline.config": [("pipeline.config.loader", ("load_spec",))],
    })
    assert past_the_face(graph) == [
        "pipeline.search.space:1 imports pipeline.config.domains: import it from pipeline.config",
        "pipeline.cli.main:1 imports pipeline.config.loader: import it from pipeline.config",
    ]


def test_a_private_import_is_found():
    graph = _graph({
        "pipeline.select.evaluate": [("pipeline.prepare.data", ("_read_file", "task_spec"))],
        "pipeline.training.export": [("methods._bert", ("count_parameters",))],
        "methods.cofi": [("methods._l0", ("HardConcreteMasks",))],  # inside its own package: fine
    })
    assert private_imports(graph) == [
        "pipeline.select.evaluate:1 imports _read_file from pipeline.prepare.data",
        "pipeline.training.export:1 imports the private module methods._bert",
    ]


def test_process_coordination_in_a_method_is_found():
    graph = _graph({
        "methods.minilm": [("fcntl", ()), ("torch.distributed", ()), ("torch", ("distributed",)), ("torch", ("nn",))],
        "pipeline.training.engine": [("deepspeed", ())],
    })
    assert forbidden_in_methods(graph) == [
        "methods.minilm:1 imports fcntl", "methods.minilm:1 imports torch.distributed", "methods.minilm:1 imports torch",
    ]


def test_relative_imports_are_resolved():
    def first(source: str, module: str, is_package: bool = False) -> str:
        node = ast.parse(source).body[0]
        return absolute(module, is_package, node)

    assert first("from .loop import run", "pipeline.training.trial") == "pipeline.training.loop"
    assert first("from ..search import driver", "pipeline.training.trial") == "pipeline.search"
    assert first("from .engine import Engine", "pipeline.training", is_package=True) == "pipeline.training.engine"


def test_torch_distributed_through_import_torch_and_ray_in_a_trial_are_found(tmp_path):
    (tmp_path / "m.py").write_text("import torch\n\ndef rank():\n    return torch.distributed.get_rank()\n")
    assert distributed_attributes({"methods.minilm": tmp_path / "m.py"}) == ["methods.minilm:4 uses torch.distributed"]
    graph = _graph({"pipeline.training.trial": [("ray", ())], "pipeline.search.worker": [("ray.train", ())]})
    assert forbidden_in_process(graph) == ["pipeline.training.trial:1 imports ray"]


def test_a_long_function_is_found(tmp_path):
    path = tmp_path / "long.py"
    path.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 80 + "    return x\n")
    assert long_functions({"long": path}) == ["long.long: 82 lines"]
