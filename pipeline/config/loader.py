"""Loading a spec: safe YAML → `${VAR}` expansion (an unset variable is an error naming the
field; `${VAR:-default}` gives a default) → `--set a.b=value` overrides → pydantic validation
(`pipeline.config.schema`) → the checks that need the methods (`pipeline.config.checks`). All
problems are collected and reported together, one line each, as `field.path: what was expected`.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from pipeline.config.checks import trial_count_problems, validate_methods
from pipeline.config.messages import did_you_mean, format_error
from pipeline.config.params import METHOD_PROBLEMS
from pipeline.config.schema import GLUE_TASKS, MAX_SPEC_BYTES, MAX_SPEC_DEPTH, MAX_SPEC_VALUES, SweepSpec
from pipeline.errors import SpecError, redacted

# loading
# ----------------------------------------------------------------------------------------------

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand_env(node: Any, path: str, problems: list[str], written: dict[str, tuple[str, Any]] | None = None) -> Any:
    """`${VAR}` and `${VAR:-default}` replaced by the environment's values; `written` collects each
    path that held one, as (the text as written, its value), for `spec_as_written`."""
    if isinstance(node, dict):
        return {k: _expand_env(v, f"{path}.{k}" if path else str(k), problems, written) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_env(v, f"{path}[{i}]", problems, written) for i, v in enumerate(node)]
    if isinstance(node, str) and "${" in node:

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            value = os.environ.get(name)
            if value is None or (value == "" and default is not None):
                if default is None:
                    problems.append(f"{path}: environment variable {name} is not set (used as ${{{name}}})")
                    return ""
                return default
            return value

        expanded = _ENV.sub(sub, node)
        value = None if expanded == "" and node.strip().startswith("${") else expanded
        if written is not None:
            written[path] = (node, value)
        return value
    return node


def _check_size(raw: dict[str, Any]) -> None:
    """Refuse a spec whose YAML aliases expand without limit, before anything walks it.

    PyYAML reads `*name` as the same object as its `&name` anchor, so 500 bytes of nested aliases
    load in milliseconds as a few shared lists that expand to billions of values: everything that
    walks the spec (the `${VAR}` expansion, pydantic) would run out of memory. The expanded size
    is counted here once per distinct object, so this stays as cheap as the file is small; a
    recursive alias and a nesting deeper than MAX_SPEC_DEPTH are refused too.
    """
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any, path: str, depth: int) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_:
            raise SpecError(f"{path}: is a recursive YAML alias (a value that contains itself); write the value out")
        if depth > MAX_SPEC_DEPTH:
            raise SpecError(f"{path}: nested more than {MAX_SPEC_DEPTH} levels deep")
        open_.add(id(node))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        total = 1 + sum(size(v, f"{path}.{k}" if isinstance(node, dict) else f"{path}[{k}]", depth + 1) for k, v in items)
        open_.discard(id(node))
        sizes[id(node)] = total
        return total

    total = sum(size(v, str(k), 1) for k, v in raw.items())
    if total <= MAX_SPEC_VALUES:
        return
    # name the innermost field that holds most of it (a grid of aliases, not the whole `methods`)
    path, node = max(((str(k), v) for k, v in raw.items()), key=lambda kv: size(kv[1], kv[0], 1))
    while True:
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        big = [(k, v) for k, v in items if 2 * size(v, "", 1) > size(node, "", 1)]
        if not big:
            break
        path = f"{path}.{big[0][0]}" if isinstance(node, dict) else f"{path}[{big[0][0]}]"
        node = big[0][1]
    raise SpecError(f"{path}: holds {size(node, path, 1):,} values once its YAML aliases (*name) are expanded; "
                    f"a spec may hold at most {MAX_SPEC_VALUES:,}")


class _SpecLoader(yaml.SafeLoader):
    """Safe YAML with YAML 1.2 booleans: only true/false are booleans.

    PyYAML follows YAML 1.1, where on/off/yes/no are booleans too, so `bf16: on` arrived as True
    and was rejected by a field whose documented values are "auto", "on", "off". Boolean fields
    lose nothing: pydantic still reads "on"/"off"/"yes"/"no" as booleans.

    A key given twice in one mapping is an error naming it and both lines (PyYAML keeps the last
    silently, so the first, often the one meant, would be ignored); `<<` merge keys may still be
    overridden. Aliases are read as PyYAML reads them (shared objects, never copied here);
    `spec_from_dict` bounds what they expand to.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {first_line[key]}; YAML would keep only the last)",
                    key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_BOOL_TAG = "tag:yaml.org,2002:bool"
_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SpecLoader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_SpecLoader)  # a SafeLoader subclass: never constructs objects


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` → (["a","b","c"], value), the value parsed as YAML (safely: never code)."""
    if "=" not in text:
        raise SpecError(f"--set {text}: expected KEY=VALUE, e.g. train.epochs=1")
    key, raw = text.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise SpecError(f"--set {text}: empty key")
    try:
        value = _load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise SpecError(f"--set {text}: value is not valid YAML ({e.__class__.__name__})") from None
    return parts, value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    for text in overrides:
        parts, value = parse_override(text)
        node = raw
        for p in parts[:-1]:
            child = node.get(p)
            if not isinstance(child, dict):
                child = {}
                node[p] = child
            node = child
        node[parts[-1]] = value
    return raw


def _task_name_hint(err: Mapping[str, Any]) -> str:
    """A task whose name is a typo of a GLUE task's fails as a custom task (no text columns, no
    labels) or as a GLUE directory's unknown task: the error says which GLUE name was meant."""
    given = err.get("input")
    if tuple(err["loc"]) != ("task",) or not isinstance(given, dict) or not isinstance(given.get("name"), str):
        return ""
    name = given["name"].strip().lower().replace("-", "")
    return "" if name in GLUE_TASKS else did_you_mean(name, GLUE_TASKS)


def error_lines(error: ValidationError) -> list[str]:
    """A spec's validation errors, one `field.path: what was expected` line each (the `methods:`
    section's own problems arrive together, as one error holding their lines)."""
    lines: list[str] = []
    for err in error.errors():
        lines += err["ctx"]["lines"] if err["type"] == METHOD_PROBLEMS else [format_error(err, SweepSpec, _task_name_hint(err))]
    return lines


def load_spec(path: str | Path, overrides: list[str] | None = None) -> SweepSpec:
    """Read, expand, override and validate a spec; raises SpecError listing every problem."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: spec file not found")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)  # not the whole of a file that is not a spec
    except OSError as e:
        raise SpecError(f"{path}: cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: larger than a spec may be ({MAX_SPEC_BYTES:,} bytes at most; is this the spec file?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise SpecError(f"{path}: line {line}: byte {e.start} (0x{data[e.start]:02x}) is not UTF-8; save the spec as UTF-8") from None
    try:
        raw = _load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())  # one line, whatever PyYAML wrote
        raise SpecError(f"{path}{where}: not valid YAML ({problem})") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a spec (at most {MAX_SPEC_DEPTH} levels)") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    return spec_from_dict(raw, overrides or [])


def spec_from_dict(raw: dict[str, Any], overrides: list[str] | None = None) -> SweepSpec:
    _check_size(raw)  # before anything walks it, overrides' deep copy included
    raw = apply_overrides(raw, overrides or [])
    _check_size(raw)  # a --set value is YAML too
    problems: list[str] = []
    written: dict[str, tuple[str, Any]] = {}
    raw = _expand_env(raw, "", problems, written)
    if problems:
        raise SpecError(problems)
    try:
        spec = SweepSpec.model_validate(raw)
        loaded = spec_to_dict(spec)  # each templated field as validated (`"3"` read as 3.0): what "unchanged" means later
        spec._written = {path: (text, _lookup(loaded, path)) for path, (text, _) in written.items()}
    except ValidationError as e:
        problems = error_lines(e)
        partial, left_out = _without_errors(raw, e)
        if partial is not None:  # what the other checks find in the rest of the spec, said in the same pass
            error_so_far = SpecError(problems, left_out=left_out)
            problems += error_so_far.about_the_rest(validate_methods(partial) + trial_count_problems(partial))
        raise SpecError(problems, partial=partial, left_out=left_out) from None
    problems = validate_methods(spec) + trial_count_problems(spec)
    if problems:
        raise SpecError(problems)
    return spec


def _without_errors(raw: dict[str, Any], error: ValidationError) -> tuple[SweepSpec | None, tuple[str, ...]]:
    """The spec with every field an error names left out (to its default), when that validates,
    and the fields left out: so the checks that need a whole spec (the methods against the
    resources, trial counts, the teacher's limits) report on the rest in the same pass as the
    schema's errors (`SpecError.about_the_rest` keeps what they say about the fields left out
    from being said). None when a field left out was required, or the rest still fails."""
    trimmed = copy.deepcopy(raw)
    left_out = tuple(sorted({".".join(map(str, err["loc"])) for err in error.errors() if err["loc"]}))
    for err in error.errors():
        node: Any = trimmed
        *parents, last = err["loc"] or ("",)
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
        elif isinstance(node, list) and isinstance(last, int) and last < len(node):
            return None, left_out  # an item of a list: leaving it out would change the list's meaning
    try:
        return SweepSpec.model_validate(trimmed), left_out
    except ValidationError:
        return None, left_out


def spec_to_dict(spec: SweepSpec) -> dict[str, Any]:
    """A plain dict that round-trips through `spec_from_dict` (what Ray ships to workers)."""
    return spec.model_dump(mode="json")


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def spec_as_written(spec: SweepSpec) -> dict[str, Any]:
    """`spec_to_dict` with each field that held a `${VAR}` written as it was, not as its value:
    what a run stores (spec.json, the MLflow parent run's artifact), so that a credential or a
    host-specific path passed through the environment is never written down. A field whose value
    changed since it was read (a pinned revision) keeps the new value."""
    data = spec_to_dict(spec)
    for path, (text, value) in spec._written.items():
        parts = _parts(path)
        node = _lookup(data, parts[:-1])
        if parts and value is not None and _child(node, parts[-1]) == value:
            node[parts[-1]] = text
    return data


def written_values(spec: SweepSpec) -> dict[str, Any]:
    """The values of the fields the spec wrote as `${VAR}`, by the loader's path (`train.epochs`,
    `seeds[0]`), a URI's user part and query values left out (`_where`): what a run takes from its environment
    and spec.json does not record (`spec_as_written`), so that a --resume can tell a variable
    whose value changed; a rotated password is not a change of where the run's data goes."""
    data = spec_to_dict(spec)
    values: dict[str, Any] = {}
    for path, (_, loaded) in spec._written.items():
        value = _lookup(data, path)
        if value is None or value != loaded:  # set since it was read (bf16 decided, a pinned revision):
            continue  # spec.json holds it in clear (`spec_as_written`) and the resume compares it there
        values[path] = _where(value) if isinstance(value, str) else value
    return values


def _where(text: str) -> str:
    """A URI without what may be a credential — the whole user part (`user:password@`, or a token
    given as the user) and every query value — so only where it points is left; other text as is."""
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    try:
        parts = urlsplit(text)
    except ValueError:
        return redacted(text)
    if not (parts.scheme and parts.netloc):
        return text
    query = "&".join(sorted(k for k, _ in parse_qsl(parts.query, keep_blank_values=True)))
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, query, parts.fragment))


def _parts(path: str) -> list[str | int]:
    """`selection.runtimes[1]` → ["selection", "runtimes", 1]: the loader's paths, as keys and indexes."""
    return [m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _PATH_PART.finditer(path)]


def _lookup(data: Any, path: str | list[str | int]) -> Any:
    node = data
    for part in _parts(path) if isinstance(path, str) else path:
        node = _child(node, part)
    return node


def _child(node: Any, part: str | int) -> Any:
    """`node[part]` where the path still leads somewhere (a dict's key, a list's index), else None."""
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and part < len(node):
        return node[part]
    return None

