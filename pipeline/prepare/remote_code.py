"""Custom model code in a saved model folder: recorded by its digest, checked before it runs.

A CoFi student ships its architecture as Python (`_pruned_bert.py`, named by the `auto_map` of
its `config.json`), and transformers *runs* that file when the folder is loaded with
`trust_remote_code=True`. So the export records the SHA-256 of every `.py` file of the folder in
`drydock.json` (`code_files`: file → digest; `code_sha256`: one digest over them all, which the
trial's MLflow run and the registry version are tagged with), and every loader in drydock calls
`remote_code(folder)` first and passes its answer as `trust_remote_code`:

- a folder whose configs name no custom code (a stock BERT) is False, whatever `.py` files lie
  beside it: loaded with `trust_remote_code=False`, transformers runs none of them;
- a folder whose configs name custom code is True only when every `.py` file in it has the
  digest recorded for it, none is missing or added, and the modules the configs name are among
  them; anything else is a `DrydockError` naming the file, raised before anything is imported.

The consumer's pyfunc (`pipeline/measure/student_pyfunc.py`), which runs without drydock, repeats
the same check against the digests recorded in its own model config.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from pipeline.errors import DrydockError

METADATA_FILE = "drydock.json"  # written by pipeline.training.export.save_student
CODE_FILES_KEY = "code_files"  # drydock.json: {relative path of each .py file: its SHA-256}
CODE_DIGEST_KEY = "code_sha256"  # drydock.json and the registry's tags: `combined_digest` of those
WEIGHTS_FILES_KEY = "weights_files"  # drydock.json: {relative path of each .safetensors file: its SHA-256}
CONFIG_FILES = ("config.json", "tokenizer_config.json")  # where transformers finds custom classes
SEE = "docs/security.md"


def file_digests(folder: Path) -> dict[str, str]:
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*.py"))}


def combined_digest(digests: dict[str, str]) -> str:
    """One SHA-256 for a folder's code: of the sorted `file  digest` lines (as `sha256sum` prints them)."""
    lines = "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def code_record(folder: Path) -> dict[str, Any]:
    """What an export adds to drydock.json: its code's digests ({} for a folder without code)."""
    digests = file_digests(folder)
    return {CODE_FILES_KEY: digests, CODE_DIGEST_KEY: combined_digest(digests)} if digests else {}


_DIGESTS: dict[tuple[str, tuple[int, ...]], str] = {}  # (path, file identity) → SHA-256, this process
RACY_S = 2.0  # a file modified this recently may change again within its timestamps' granularity


def file_sha256(path: str | Path) -> str:
    """A file's SHA-256, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_digest(path: Path) -> str:
    """A weights file's SHA-256, computed once per content in a process: every loader checks the
    weights (latency, the engines, the registry, the export's reload), and a teacher's file is
    tens of MB. The content is known by the file's identity — device, inode, size, and the
    modification and change times in ns; a write changes the change time, which no caller can
    set back — so a same-size file copied over it is hashed again. A file modified under `RACY_S`
    before it was hashed is not remembered (git's "racily clean" rule): a rewrite within the
    timestamps' granularity (coarse on older kernels) would keep its identity. NFS clients cache
    attributes, so on such a volume a rewrite by another node may be seen late, as it is by any
    reader there."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    if key in _DIGESTS:
        return _DIGESTS[key]
    started = time.time()
    digest = file_sha256(key[0])
    if started - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 > RACY_S:
        _DIGESTS[key] = digest
    return digest


def weights_record(folder: Path) -> dict[str, Any]:
    """What an export adds to drydock.json beside its code's digests: its weights' digests, so a
    `model.safetensors` copied in from another student is refused instead of evaluated."""
    folder = Path(folder)
    return {WEIGHTS_FILES_KEY: {p.relative_to(folder).as_posix(): weights_digest(p) for p in sorted(folder.rglob("*.safetensors"))}}


def check_weights(folder: Path) -> None:
    """Every weights file drydock.json records has the recorded SHA-256, and no other weights
    file lies beside them; a `DrydockError` naming the file otherwise. A folder without a record
    (a teacher, an export written before records were kept) is not checked."""
    recorded = recorded_weights(folder)
    if not recorded:
        return
    actual = weights_record(Path(folder))[WEIGHTS_FILES_KEY]
    for name in sorted(set(actual) | set(recorded)):
        if actual.get(name) != recorded.get(name):
            why = ("is not recorded" if name not in recorded else "is missing" if name not in actual
                   else f"has SHA-256 {actual[name]}, but {recorded[name]} was recorded at export")
            raise DrydockError(f"{Path(folder) / name}: this weights file {why} in {METADATA_FILE}: the folder's weights are "
                               "not the exported ones (copied from another model?); refusing to load it")


def _class_refs(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [r for item in value for r in _class_refs(item)]
    if isinstance(value, dict):
        return [r for item in value.values() for r in _class_refs(item)]
    return []


def named_code(folder: Path) -> list[str]:
    """The code files the folder's configs name (`auto_map`, `custom_pipelines`): what
    `trust_remote_code=True` would import. Code from another repository (`repo--module.Class`)
    is refused outright: nothing records it."""
    names: set[str] = set()
    for config_name in CONFIG_FILES:
        path = Path(folder) / config_name
        if not path.is_file():
            continue
        try:
            config = json.loads(path.read_text())
        except (UnicodeDecodeError, ValueError) as e:
            raise DrydockError(f"{path}: not a JSON file ({e})") from None
        if not isinstance(config, dict):
            raise DrydockError(f"{path}: not a JSON object")
        refs = _class_refs(config.get("auto_map"))
        refs += _class_refs([p.get("impl") for p in (config.get("custom_pipelines") or {}).values() if isinstance(p, dict)])
        for ref in refs:
            if "--" in ref:
                raise DrydockError(f"{path}: names code from another repository ({ref}); drydock runs only code recorded with the export")
            names.add(ref.rsplit(".", 1)[0].replace(".", "/") + ".py")
    return sorted(names)


def _recorded(folder: Path, key: str, what: str) -> dict[str, str] | None:
    """The digests drydock.json records under `key` (None: no file, or none recorded)."""
    path = Path(folder) / METADATA_FILE
    if not path.is_file():
        return None
    try:
        files = json.loads(path.read_text()).get(key)
    except (UnicodeDecodeError, ValueError, AttributeError):
        raise DrydockError(f"{path}: not a JSON object; the folder's {what} cannot be checked") from None
    return files if isinstance(files, dict) and files else None


def recorded_weights(folder: Path) -> dict[str, str] | None:
    """The digests drydock.json records for the folder's weights files (None: none recorded)."""
    return _recorded(folder, WEIGHTS_FILES_KEY, "weights")


def recorded_code(folder: Path) -> dict[str, str] | None:
    """The digests drydock.json records for the folder's code (None: none recorded)."""
    return _recorded(folder, CODE_FILES_KEY, "custom code")


def code_mismatch(folder: Path, recorded: dict[str, str]) -> str | None:
    """Why the folder's `.py` files are not the recorded ones (None: they are)."""
    actual = file_digests(folder)
    for name in sorted(set(actual) | set(recorded)):
        if name not in recorded:
            return f"{Path(folder) / name}: this code file is not recorded in {METADATA_FILE}"
        if name not in actual:
            return f"{Path(folder) / name}: this recorded code file is missing"
        if actual[name] != recorded[name]:
            return f"{Path(folder) / name}: SHA-256 {actual[name]}, but {recorded[name]} was recorded at export"
    return None


def remote_code(folder: str | Path, recorded: dict[str, str] | None = None) -> bool:
    """`trust_remote_code` for loading `folder`: False for a stock architecture; True for custom
    code that is exactly the recorded code (`recorded`, default drydock.json's record);
    otherwise a `DrydockError` naming the file, and nothing is imported. Every loader asks this
    first, so the weights are checked here too (`check_weights`)."""
    folder = Path(folder)
    check_weights(folder)
    named = named_code(folder)
    if not named:
        return False
    recorded = recorded if recorded is not None else recorded_code(folder)
    if not recorded:
        raise DrydockError(f"{folder}: its config names custom code ({', '.join(named)}) but {METADATA_FILE} records no "
                           f"digest of it; refusing to run unrecorded code ({SEE})")
    for name in named:
        if name not in recorded:
            raise DrydockError(f"{folder / name}: named by the folder's config but not recorded in {METADATA_FILE}; "
                               f"refusing to run it ({SEE})")
    problem = code_mismatch(folder, recorded)
    if problem is not None:
        raise DrydockError(f"{problem}: the folder's code is not the exported code; refusing to load it ({SEE})")
    return True
