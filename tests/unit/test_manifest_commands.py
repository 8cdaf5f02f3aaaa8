"""Every command in cluster/ that starts drydock must start it on the Ray cluster, not in the pod
that submits it.

A command reaches the cluster in two hops, and both are run here for real, with fake `ray`,
`python` and `drydock` executables first on PATH (each records its argv and cwd, none does work):

1. The submitter. For a RayJob, KubeRay builds one bash line around `spec.entrypoint` (mirrored by
   `kuberay_submitter` below) and runs it in the submitter pod; the CronJob's container runs its
   argv directly; a README line runs in the user's bash. Whatever that shell does with the
   entrypoint (`&&`, `;`, quotes) happens *in the submitter*: only the words after `--` reach
   `ray job submit`.
2. The Ray job supervisor on the head. `ray job submit` joins the words after `--` into one
   string (`ray_cli_entrypoint`) and the supervisor runs that string with `/bin/sh -c`
   (`subprocess.Popen(entrypoint, shell=True)`) in a directory of Ray's choosing.

The test asserts that every word of the written entrypoint reached `ray job submit`, that drydock
ran in hop 2 with exactly the arguments the command writes, on a spec in the image and a work
directory on the shared volume, and that it never ran in hop 1. Hop 2 starts in a scratch
directory, as the supervisor starts in one of Ray's: paths must be absolute (a `cd` into the image
would also fail here, where there is no /opt/drydock). No network, no Ray, no Kubernetes.

Known failure modes this catches (upstream reports): an entrypoint with `&&` or `;` runs only its
first command on the cluster and the rest in the submitter (kuberay#3561, kuberay#3802), and an
entrypoint passed to `ray job submit` as one quoted word is one command name to `/bin/sh`
(`/bin/sh: 1: python script.py: not found`, ray#25519).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import list2cmdline
from typing import Any

import pytest
import yaml

from pipeline.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
K8S = sorted((CLUSTER / "k8s").glob("*.yaml"))
LAUNCHER = sorted((CLUSTER / "ray").glob("*.yaml"))
README = CLUSTER / "README.md"

SHARED_MOUNT = "/mnt/drydock"  # the ReadWriteMany work directory on every Ray node
# Where the repository lives on a Ray node: the image (cluster/Dockerfile) and the launcher's
# file_mounts (cluster/ray/gpu-cluster.yaml).
IMAGE_HOMES = ("/opt/drydock", "/home/ray/drydock")

# The kinds whose commands are simulated below. A drydock command anywhere else in cluster/ fails
# test_every_manifest_command_that_runs_drydock_is_simulated until it is added here.
SIMULATED_KINDS = {"RayJob", "CronJob", "Job"}


# ----------------------------------------------------------------------------------------------
# KubeRay: how the submitter pod's command is built from spec.entrypoint
#
# Mirrored from github.com/ray-project/kuberay, commit feeaf72facab4881ba2b179248bb67315634e229:
#   ray-operator/controllers/ray/common/job.go       BuildJobSubmitCommand: a list of words
#   ray-operator/controllers/ray/rayjob_controller.go configureSubmitterContainer: if the
#       submitter container sets no command (or in SidecarMode), command = GetContainerCommand(["e"])
#       and args = [strings.Join(words, " ")]; env += PYTHONUNBUFFERED, RAY_DASHBOARD_ADDRESS,
#       RAY_JOB_SUBMISSION_ID
#   ray-operator/controllers/ray/utils/util.go       GetContainerCommand: ["/bin/bash", "-ce", "--"]
#   ray-operator/controllers/ray/utils/constant.go   BasePythonHealthCommand, RayDashboardGCSHealthPath
#   ray-operator/controllers/ray/common/pod.go       SetContainerTokenAuthEnvVars: with the cluster's
#       authOptions.mode token, configureSubmitterContainer adds RAY_AUTH_MODE=token and RAY_AUTH_TOKEN
#       (key auth_token of authOptions.secretName, else of a secret named after the cluster), unless set
# The entrypoint is one word of that list, pasted unquoted between `--` and `;`: the submitter's
# bash parses it.
# ----------------------------------------------------------------------------------------------

KUBERAY_HEALTH_COMMAND = ('python -c "import urllib.request; r=urllib.request.urlopen(\'%s\', timeout=%d); '
                          "exit(0 if b'success' in r.read() else 1)\"")
KUBERAY_HEALTH_PATH = "api/gcs_healthz"
KUBERAY_HEALTH_TIMEOUT_S = 10
KUBERAY_DASHBOARD_PORT = 8265


def go_quote(text: str) -> str:
    """Go's strconv.Quote, for the ASCII text it is used on here."""
    return json.dumps(text, ensure_ascii=False)


def kuberay_job_submit_command(spec: dict[str, Any], *, mode: str, dashboard_url: str, job_id: str) -> list[str]:
    """job.go, BuildJobSubmitCommand: the submitter's words. `mode` is K8sJobMode or SidecarMode;
    the SidecarSubmitterRestart feature gate is taken as off (its default)."""
    if mode == "SidecarMode":
        port = KUBERAY_DASHBOARD_PORT  # FindContainerPort(head, "dashboard", 8265)
        head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        port = next((p["containerPort"] for p in head.get("ports", []) if p.get("name") == "dashboard"), port)
        address = f"http://127.0.0.1:{port}"
        health_url = f"http://localhost:{port}/{KUBERAY_HEALTH_PATH}"
    elif mode == "K8sJobMode":
        address = dashboard_url if dashboard_url.startswith("http://") else "http://" + dashboard_url
        health_url = address + "/" + KUBERAY_HEALTH_PATH
    else:
        raise ValueError(f"unsupported submission mode for job submit command: {mode}")
    entrypoint = spec["entrypoint"].strip()  # strings.TrimSpace

    cmd = ["until", KUBERAY_HEALTH_COMMAND % (health_url, KUBERAY_HEALTH_TIMEOUT_S), ">/dev/null", "2>&1", ";",
           "do", "echo", go_quote(f"Waiting for Ray Dashboard GCS to become healthy at {address} ..."), ";",
           "sleep", "2", ";", "done", ";"]
    needs_status_check = mode == "K8sJobMode"
    if needs_status_check:
        cmd += ["if", "!", "ray", "job", "status", "--address", address, job_id, ">/dev/null", "2>&1", ";", "then"]
    cmd += ["ray", "job", "submit", "--address", address]
    if needs_status_check:
        cmd.append("--no-wait")
    if spec.get("runtimeEnvYAML"):  # sigs.k8s.io/yaml YAMLToJSON: compact JSON, keys sorted
        runtime_env = json.dumps(yaml.safe_load(spec["runtimeEnvYAML"]), separators=(",", ":"), sort_keys=True)
        cmd += ["--runtime-env-json", go_quote(runtime_env)]
    if spec.get("metadata"):
        cmd += ["--metadata-json", go_quote(json.dumps(spec["metadata"], separators=(",", ":"), sort_keys=True))]
    if job_id:
        cmd += ["--submission-id", job_id]
    if spec.get("entrypointNumCpus", 0) > 0:
        cmd += ["--entrypoint-num-cpus", f"{float(spec['entrypointNumCpus']):f}"]  # Go's %f
    if spec.get("entrypointNumGpus", 0) > 0:
        cmd += ["--entrypoint-num-gpus", f"{float(spec['entrypointNumGpus']):f}"]
    if spec.get("entrypointResources"):
        cmd += ["--entrypoint-resources", go_quote(spec["entrypointResources"])]
    cmd += ["--", entrypoint, ";"]
    if needs_status_check:
        cmd += ["fi", ";", "ray", "job", "logs", "--address", address, "--follow", job_id]
    return cmd


def kuberay_submitter(rayjob: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """rayjob_controller.go, getSubmitterTemplate + configureSubmitterContainer: the argv the
    submitter container executes (Kubernetes runs command + args directly, no shell) and the
    environment KubeRay adds to it."""
    spec = rayjob["spec"]
    name, namespace = rayjob["metadata"]["name"], rayjob["metadata"].get("namespace", "default")
    mode = spec.get("submissionMode", "K8sJobMode")
    # What KubeRay writes into the status before it submits: the head Service of the RayJob's own
    # cluster (utils.GenerateHeadServiceName) and spec.jobId or a generated id.
    dashboard_url = f"{name}-head-svc.{namespace}.svc.cluster.local:{KUBERAY_DASHBOARD_PORT}"
    job_id = spec.get("jobId") or f"{name}-x7k2p"
    words = kuberay_job_submit_command(spec, mode=mode, dashboard_url=dashboard_url, job_id=job_id)
    if mode == "SidecarMode":
        container: dict[str, Any] = {}
    else:
        template = spec.get("submitterPodTemplate") or {"spec": {"containers": [{}]}}
        container = template["spec"]["containers"][0]
    if not container.get("command") or mode == "SidecarMode":
        argv = ["/bin/bash", "-ce", "--", " ".join(words)]
    else:  # a user's own command is kept as written (with RAY_DASHBOARD_ADDRESS etc. to use)
        argv = [*container["command"], *container.get("args", [])]
    env = container_env(container)
    env.update(PYTHONUNBUFFERED="1", RAY_DASHBOARD_ADDRESS=dashboard_url, RAY_JOB_SUBMISSION_ID=job_id)
    auth = (spec.get("rayClusterSpec") or {}).get("authOptions") or {}
    if auth.get("mode") == "token":  # the cluster KubeRay creates for the RayJob is named {name}-xxxxx
        env.setdefault("RAY_AUTH_MODE", "token")
        env.setdefault("RAY_AUTH_TOKEN", f"<secret {auth.get('secretName') or name + '-x7k2p'}/auth_token>")
    return argv, env


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment: literal values, and a stand-in for each value from a secret."""
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = f"<secret {ref['name']}/{ref['key']}>"
    return env


# ----------------------------------------------------------------------------------------------
# Ray: how `ray job submit ... -- WORDS` becomes the string the job supervisor runs
#
# ray/dashboard/modules/job/cli.py, `submit`: the words after `--` (click nargs=-1) are joined into
# one entrypoint string, with shlex.join in Ray 2.60 (list2cmdline on Windows and in older Ray).
# ray/dashboard/modules/job/job_supervisor.py, JobSupervisor._exec_entrypoint:
# subprocess.Popen(entrypoint, shell=True, ...), i.e. `/bin/sh -c ENTRYPOINT`, in the supervisor
# actor's working directory (not the image's WORKDIR by any promise).
# ----------------------------------------------------------------------------------------------

RAY_JOINERS: dict[str, Callable[[list[str]], str]] = {"shlex.join": shlex.join, "list2cmdline": list2cmdline}


def ray_cli_entrypoint(submit_argv: list[str]) -> list[str]:
    """The words `ray job submit` takes as the entrypoint: everything after the first `--`."""
    assert "--" in submit_argv, f"`ray {shlex.join(submit_argv)}` has no `--` before the entrypoint"
    return submit_argv[submit_argv.index("--") + 1:]


# ----------------------------------------------------------------------------------------------
# the commands under test
# ----------------------------------------------------------------------------------------------


@dataclass
class Submission:
    where: str
    argv: list[str]  # what the submitting process executes, directly (no shell around it)
    intended: list[str]  # the drydock arguments the command writes
    written: list[str]  # the entrypoint's words as written: all of them must reach `ray job submit`
    env: dict[str, str] = field(default_factory=dict)
    marks: list[Any] = field(default_factory=list)


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def drydock_subcommands() -> set[str]:
    parser = build_parser()
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            return set(action.choices)
    raise AssertionError("drydock's parser has no subcommands")


SUBCOMMANDS = drydock_subcommands()
SEPARATORS = {"&&", "||", ";", "|", "&"}
DRYDOCK_COMMAND = re.compile(r"\bdrydock\s+(" + "|".join(sorted(SUBCOMMANDS)) + r")\b")


def written_drydock_args(text: str) -> list[str]:
    """The one `drydock SUBCOMMAND ...` written in a command: the words after `drydock`, up to a
    shell separator (a script inside a word, as after `bash -c` or a quoted `--` word, counts)."""

    def commands(line: str) -> Iterator[list[str]]:
        words = shlex.split(line)
        for i, word in enumerate(words):
            if word == "drydock" and words[i + 1:i + 2] and words[i + 1] in SUBCOMMANDS:
                args = []
                for w in words[i + 1:]:
                    if w in SEPARATORS:
                        break
                    args.append(w.rstrip(";"))
                    if w.endswith(";"):
                        break
                yield args
            elif any(ch.isspace() for ch in word):
                yield from commands(word)

    found = list(commands(text))
    assert len(found) == 1, f"expected one drydock command in {text!r}, found {found}"
    return found[0]


def pod_containers(kind: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    template = doc["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" else doc["spec"]["template"]
    return template["spec"].get("initContainers", []) + template["spec"]["containers"]


def manifest_submissions() -> Iterator[Submission]:
    for path in K8S:
        rel = path.relative_to(CLUSTER).as_posix()
        for doc in docs(path):
            kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
            if kind == "RayJob":
                argv, env = kuberay_submitter(doc)
                entrypoint = doc["spec"]["entrypoint"]
                yield Submission(f"{rel} RayJob/{name}", argv, written_drydock_args(entrypoint),
                                 shlex.split(entrypoint), env)
            elif kind in ("CronJob", "Job"):
                for c in pod_containers(kind, doc):
                    argv = [*c.get("command", []), *c.get("args", [])]
                    if DRYDOCK_COMMAND.search(" ".join(argv)):
                        env = container_env(c)
                        yield Submission(f"{rel} {kind}/{name} {c['name']}", argv,
                                         written_drydock_args(shlex.join(argv)), ray_cli_entrypoint(argv[1:]), env)


# cluster/README.md, section 4 (the AWS launcher) is outside this change; its line has the bug this
# test finds (a quoted `cd ... && drydock sweep ...` word). Drop this mark when it is fixed.
README_KNOWN_BROKEN: dict[str, str] = {}  # section prefix → why its `ray job submit` line is known broken


def readme_submissions() -> Iterator[Submission]:
    """`ray job submit` lines in the README's bash blocks, run as the user's bash runs them."""
    section = ""
    text = README.read_text()
    for match in re.finditer(r"^(## [^\n]*)$|```(?:bash|sh|shell)\n(.*?)```", text, re.DOTALL | re.MULTILINE):
        if match.group(1):
            section = match.group(1)
            continue
        for line in match.group(2).replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("ray job submit") and "drydock" in line:
                marks = [pytest.mark.xfail(strict=True, reason=reason)
                         for prefix, reason in README_KNOWN_BROKEN.items() if section.startswith(prefix)]
                yield Submission(f"README.md section {section.split('.')[0].lstrip('# ')}: {line[:40]}...",
                                 ["/bin/bash", "-c", line], written_drydock_args(line),
                                 ray_cli_entrypoint(shlex.split(line)), marks=marks)


SUBMISSIONS = list(manifest_submissions()) + list(readme_submissions())
CASES = [pytest.param(s, id=s.where, marks=s.marks) for s in SUBMISSIONS]


# ----------------------------------------------------------------------------------------------
# running the two hops with fakes
# ----------------------------------------------------------------------------------------------

FAKE_RAY = """#!{python}
import json, os, sys
with open(os.path.join(os.environ["FAKE_LOG_DIR"], "ray.jsonl"), "a") as f:
    auth = {{k: os.environ[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN") if k in os.environ}}
    f.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "auth": auth}}) + "\\n")
# `ray job status ID`: no such job yet, so KubeRay's submitter takes its submit branch
sys.exit(1 if sys.argv[1:3] == ["job", "status"] else 0)
"""

FAKE_DRYDOCK = """#!{python}
import json, os, sys
with open(os.path.join(os.environ["FAKE_LOG_DIR"], "drydock.jsonl"), "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "hop": os.environ.get("FAKE_HOP")}}) + "\\n")
sys.exit(int(os.environ.get("FAKE_DRYDOCK_RC", "0")))
"""

# KubeRay's wait loop polls the dashboard with `python -c "...urlopen..."`: healthy at once here.
FAKE_PYTHON = "#!/bin/sh\nexit 0\n"


@dataclass
class Fakes:
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def env(self, hop: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        # Only the fakes and the system's own tools: no real `ray` or `drydock` can be found.
        return {**(extra or {}), "PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.root),
                "LC_ALL": "C", "FAKE_LOG_DIR": str(self.root), "FAKE_HOP": hop}

    def calls(self, program: str) -> list[dict[str, Any]]:
        log = self.root / f"{program}.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def clear(self, program: str) -> None:
        (self.root / f"{program}.jsonl").unlink(missing_ok=True)


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    f = Fakes(tmp_path)
    f.bin.mkdir()
    for name, body in (("ray", FAKE_RAY), ("drydock", FAKE_DRYDOCK), ("python", FAKE_PYTHON)):
        script = f.bin / name
        script.write_text(body.format(python=sys.executable))
        script.chmod(0o755)
    return f


def run(argv: list[str] | str, cwd: Path, env: dict[str, str], *, shell: bool = False) -> subprocess.CompletedProcess:
    cwd.mkdir(exist_ok=True)
    if not shell:  # Kubernetes and exec(): the first word is looked up on the container's PATH
        assert isinstance(argv, list)
        argv = [shutil.which(argv[0], path=env["PATH"]) or argv[0], *argv[1:]]
    return subprocess.run(argv, cwd=cwd, env=env, shell=shell, capture_output=True, text=True, timeout=60)


def submit(fakes: Fakes, s: Submission) -> list[str]:
    """Hop 1: run the submitter's command; return the entrypoint words `ray job submit` got."""
    done = run(s.argv, fakes.root / "submitter", fakes.env("submitter", s.env))
    assert done.returncode == 0, f"{s.where}: the submitter's command failed:\n{done.stdout}{done.stderr}"
    in_submitter = fakes.calls("drydock")
    assert not in_submitter, (
        f"{s.where}: `drydock {shlex.join(in_submitter[0]['argv'])}` ran in the submitter pod, not on the Ray "
        f"cluster: the submitter's shell split the command before `ray job submit` saw it")
    submits = [c["argv"] for c in fakes.calls("ray") if c["argv"][:2] == ["job", "submit"]]
    assert len(submits) == 1, f"{s.where}: expected one `ray job submit`, got {submits}"
    entrypoint = ray_cli_entrypoint(submits[0])
    assert entrypoint == s.written, (
        f"{s.where}: `ray job submit` got the entrypoint {entrypoint}, but the command writes {s.written}: "
        f"the submitter's shell kept the rest")
    return entrypoint


def run_job(fakes: Fakes, entrypoint: str, rc: int = 0) -> subprocess.CompletedProcess:
    """Hop 2: the Ray job supervisor runs the entrypoint string with /bin/sh, in its own directory."""
    return run(entrypoint, fakes.root / "ray-job-supervisor", fakes.env("job", {"FAKE_DRYDOCK_RC": str(rc)}), shell=True)


def image_path(path: str, cwd: str) -> Path | None:
    """A path the drydock process got, as a file of this repository if it names one in the image."""
    absolute = os.path.normpath(os.path.join(cwd, path))
    for home in IMAGE_HOMES:
        if absolute.startswith(home + "/"):
            return ROOT / absolute[len(home) + 1:]
    return None


# ----------------------------------------------------------------------------------------------
# tests
# ----------------------------------------------------------------------------------------------


def test_the_commands_under_test_include_the_rayjob_and_the_cronjob():
    kinds = {s.where.split()[1].split("/")[0] for s in SUBMISSIONS if s.where.startswith("k8s/")}
    assert {"RayJob", "CronJob"} <= kinds, [s.where for s in SUBMISSIONS]
    assert {s.intended[0] for s in SUBMISSIONS} >= {"sweep", "retrain"}


@pytest.mark.parametrize("s", CASES)
def test_drydock_runs_on_the_cluster_with_the_manifests_arguments(s: Submission, fakes: Fakes):
    entrypoint = submit(fakes, s)
    for joiner, join in RAY_JOINERS.items():
        fakes.clear("drydock")
        done = run_job(fakes, join(entrypoint))
        ran = fakes.calls("drydock")
        assert done.returncode == 0 and len(ran) == 1, (
            f"{s.where}: the Ray job ({joiner}) `{join(entrypoint)}` did not run drydock once "
            f"(exit {done.returncode}): {done.stderr.strip()}")
        (call,) = ran
        assert call["argv"] == s.intended, f"{s.where}: drydock got {call['argv']}, the command writes {s.intended}"
        args = build_parser().parse_args(call["argv"])
        # The supervisor's directory is Ray's, not the image's: the spec must be found from anywhere.
        spec = image_path(args.spec, call["cwd"])
        assert spec is not None and spec.is_file(), (
            f"{s.where}: the job's drydock looks for its spec at {os.path.join(call['cwd'], args.spec)}, "
            f"not a spec in the image: give an absolute path under {IMAGE_HOMES[0]}")
        workdir = os.path.normpath(os.path.join(call["cwd"], str(args.workdir)))
        assert workdir.startswith(SHARED_MOUNT + "/"), f"{s.where}: work directory {workdir} is not on the shared volume"


@pytest.mark.parametrize("s", CASES)
def test_the_jobs_exit_status_is_drydocks(s: Submission, fakes: Fakes):
    """drydock retrain's 1 and 2 must fail the Ray job (and so the RayJob or the Kubernetes Job)."""
    entrypoint = submit(fakes, s)
    for rc in (0, 1, 2):
        assert run_job(fakes, shlex.join(entrypoint), rc).returncode == rc, s.where


MANIFEST_CASES = [pytest.param(s, id=s.where) for s in SUBMISSIONS if not s.where.startswith("README")]


@pytest.mark.parametrize("s", MANIFEST_CASES)
def test_every_submission_sends_the_clusters_ray_token(s: Submission, fakes: Fakes):
    """The Ray clusters turn on Ray's token authentication (authOptions.mode: token, cluster/README.md
    section 8): a `ray job submit` without RAY_AUTH_MODE=token and a token gets 401 from the job API."""
    submit(fakes, s)
    (call,) = [c for c in fakes.calls("ray") if c["argv"][:2] == ["job", "submit"]]
    assert call["auth"].get("RAY_AUTH_MODE") == "token", f"{s.where}: `ray job submit` runs without RAY_AUTH_MODE=token"
    assert call["auth"].get("RAY_AUTH_TOKEN", "").startswith("<secret "), f"{s.where}: no RAY_AUTH_TOKEN from a secret"


def test_every_manifest_command_that_runs_drydock_is_simulated():
    def strings(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for v in node.values():
                yield from strings(v)
        elif isinstance(node, list):
            for v in node:
                yield from strings(v)
        elif isinstance(node, str):
            yield node

    covered = {s.where.split()[0] for s in SUBMISSIONS}
    for path in K8S + LAUNCHER:
        rel = path.relative_to(CLUSTER).as_posix()
        for doc in docs(path):
            if any(DRYDOCK_COMMAND.search(text) for text in strings(doc)):
                kind = doc.get("kind", "Ray launcher config")
                assert kind in SIMULATED_KINDS, f"{rel}: a {kind} runs drydock, and this test does not simulate it"
                assert rel in covered, f"{rel}: runs drydock, but no case of this test runs its command"


# --- the mirrors themselves --------------------------------------------------------------------


def test_the_kuberay_mirror_reproduces_kuberays_own_expected_command():
    """Transcribed from KubeRay's ray-operator/controllers/ray/common/job_test.go,
    rayJobTemplate + TestBuildJobSubmitCommandWithK8sJobMode (same commit as above)."""
    spec = {
        "runtimeEnvYAML": "test: test",
        "metadata": {"testKey": "testValue"},
        "rayClusterSpec": {"rayVersion": "2.6.0"},
        "entrypoint": "echo no quote 'single quote' \"double quote\"",
        "entrypointNumCpus": 1,
        "entrypointNumGpus": 0.5,
        "entrypointResources": '{"Custom_1": 1, "Custom_2": 5.5}',
    }
    address = "http://127.0.0.1:8265"
    expected = [
        "until",
        KUBERAY_HEALTH_COMMAND % (address + "/api/gcs_healthz", 10),
        ">/dev/null", "2>&1", ";",
        "do", "echo", go_quote(f"Waiting for Ray Dashboard GCS to become healthy at {address} ..."), ";", "sleep", "2", ";",
        "done", ";",
        "if", "!", "ray", "job", "status", "--address", address, "testJobId", ">/dev/null", "2>&1", ";", "then",
        "ray", "job", "submit", "--address", address, "--no-wait",
        "--runtime-env-json", go_quote('{"test":"test"}'),
        "--metadata-json", go_quote('{"testKey":"testValue"}'),
        "--submission-id", "testJobId",
        "--entrypoint-num-cpus", "1.000000",
        "--entrypoint-num-gpus", "0.500000",
        "--entrypoint-resources", go_quote('{"Custom_1": 1, "Custom_2": 5.5}'),
        "--",
        "echo no quote 'single quote' \"double quote\"",
        ";", "fi", ";",
        "ray", "job", "logs", "--address", address, "--follow", "testJobId",
    ]
    assert kuberay_job_submit_command(spec, mode="K8sJobMode", dashboard_url=address, job_id="testJobId") == expected
    assert KUBERAY_HEALTH_COMMAND % ("U", 10) == (
        "python -c \"import urllib.request; r=urllib.request.urlopen('U', timeout=10); "
        "exit(0 if b'success' in r.read() else 1)\"")


def test_the_kuberay_mirror_splits_a_compound_entrypoint_like_kuberay(fakes: Fakes):
    """The failure mode itself (kuberay#3561, #3802): `A && B` as an entrypoint submits A, runs B
    in the submitter."""
    rayjob = {"metadata": {"name": "j", "namespace": "n"}, "spec": {"entrypoint": "cd /x && drydock sweep s.yaml"}}
    argv, env = kuberay_submitter(rayjob)
    assert argv[:3] == ["/bin/bash", "-ce", "--"]
    done = run(argv, fakes.root / "submitter", fakes.env("submitter", env))
    assert done.returncode == 0, done.stderr
    assert [c["argv"] for c in fakes.calls("drydock")] == [["sweep", "s.yaml"]]
    submits = [c["argv"] for c in fakes.calls("ray") if c["argv"][:2] == ["job", "submit"]]
    assert [ray_cli_entrypoint(a) for a in submits] == [["cd", "/x"]]


def test_the_ray_mirror_matches_the_installed_ray_cli():
    """The installed Ray (the image's version) joins the entrypoint words with one of RAY_JOINERS
    and the supervisor runs the result with a shell."""
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        pytest.skip("ray is not installed")
    job = Path(spec.origin).parent / "dashboard" / "modules" / "job"
    cli = (job / "cli.py").read_text()
    assert any(f"{name}(entrypoint)" in cli for name in RAY_JOINERS), "ray job submit joins its entrypoint differently now"
    supervisor = (job / "job_supervisor.py").read_text()
    assert re.search(r"Popen\(\s*self\._entrypoint,\s*shell=True", supervisor), "the job supervisor no longer uses a shell"
