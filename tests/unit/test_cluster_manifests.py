"""cluster/: every manifest, spec and DeepSpeed preset is checked here, without a cluster.

What a platform engineer applies must at least parse, carry the fields its kind requires, run
commands the CLI accepts on files that exist, agree with itself across files (images, Ray
version, service names, the shared mount), and hold no credential: those come from Kubernetes
secrets or the environment only. No network, no Ray; DeepSpeed is imported only to validate
the presets' schema.

Security (cluster/README.md, section 8) is checked as manifests too: each kind of pod has its own
service account and cloud role, and the roles' S3 policies (cluster/iam/) are evaluated against
each prefix; the NetworkPolicies are evaluated with Kubernetes' rules against each pod's labels;
Ray's token authentication, every securityContext and the database's certificate check.
"""

from __future__ import annotations

import argparse
import configparser
import copy
import fnmatch
import functools
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli.main import build_parser
from pipeline.config import load_spec

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
K8S = sorted((CLUSTER / "k8s").glob("*.yaml"))
LAUNCHER = sorted((CLUSTER / "ray").glob("*.yaml"))
SPECS = sorted((CLUSTER / "specs").glob("*.yaml"))
PRESETS = sorted((CLUSTER / "deepspeed").glob("*.json"))
MANIFESTS = K8S + LAUNCHER
IAM_POLICIES = sorted((CLUSTER / "iam").glob("*.json"))  # rendered by render.sh as well
ALL_YAML = sorted(CLUSTER.rglob("*.yaml")) + sorted(CLUSTER.rglob("*.yml"))
TEXT_FILES = sorted(p for p in CLUSTER.rglob("*") if p.is_file() and "__pycache__" not in p.parts)

NAMESPACE = "drydock"
SHARED_MOUNT = "/mnt/drydock"  # the ReadWriteMany work directory on every Ray node
IMAGE_HOME = "/opt/drydock"  # where cluster/Dockerfile keeps the repository (DRYDOCK_HOME)
RAY_IMAGE = re.compile(r"rayproject/ray:(\d+\.\d+\.\d+)-")

API_VERSIONS = {
    "Namespace": "v1", "ServiceAccount": "v1", "PersistentVolumeClaim": "v1", "ConfigMap": "v1",
    "Service": "v1", "Deployment": "apps/v1", "CronJob": "batch/v1",
    "RayCluster": "ray.io/v1", "RayJob": "ray.io/v1", "NetworkPolicy": "networking.k8s.io/v1",
}
NO_SPEC_KINDS = {"Namespace", "ServiceAccount", "ConfigMap"}


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


@functools.cache
def _parsed(path: Path, mtime_ns: int) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def docs(path: Path) -> list[dict[str, Any]]:
    """Parsed once per version of the file (the policy checks ask for the manifests thousands of
    times; parsing them each time cost ~50 s); a copy, so that no test sees another's changes."""
    return copy.deepcopy(_parsed(path, path.stat().st_mtime_ns))


def k8s_objects() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in K8S for d in docs(p)]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in k8s_objects() if d.get("kind") == kind]


def ray_cluster_specs() -> list[tuple[str, dict[str, Any]]]:
    """Every RayCluster spec: the RayCluster objects' and the RayJobs' own clusters."""
    found = [(f"RayCluster/{d['metadata']['name']}", d["spec"]) for d in of_kind("RayCluster")]
    found += [(f"RayJob/{d['metadata']['name']}", d["spec"]["rayClusterSpec"]) for d in of_kind("RayJob")
              if "rayClusterSpec" in d["spec"]]
    return found


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod template in the Kubernetes manifests, named for messages."""
    for name, spec in ray_cluster_specs():
        yield f"{name} head", spec["headGroupSpec"]["template"]["spec"]
        for group in spec["workerGroupSpecs"]:
            yield f"{name} {group['groupName']}", group["template"]["spec"]
    for job in of_kind("RayJob"):
        if "submitterPodTemplate" in job["spec"]:
            yield f"RayJob/{job['metadata']['name']} submitter", job["spec"]["submitterPodTemplate"]["spec"]
    for cron in of_kind("CronJob"):
        yield f"CronJob/{cron['metadata']['name']}", cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    for deployment in of_kind("Deployment"):
        yield f"Deployment/{deployment['metadata']['name']}", deployment["spec"]["template"]["spec"]


def containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for where, pod in pod_specs():
        for c in pod.get("initContainers", []) + pod["containers"]:
            yield f"{where} container {c['name']}", c


SENSITIVE_ENV = re.compile(
    r"PASSWORD|PASSWD|SECRET|TOKEN|ACCESS_KEY|API_KEY|PRIVATE_KEY|CREDENTIAL|^PGUSER$|USERNAME", re.IGNORECASE
)


def env_by_name(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def from_secret(entry: dict[str, Any]) -> bool:
    return "value" not in entry and "secretKeyRef" in entry.get("valueFrom", {})


# --- drydock command lines ---------------------------------------------------------------------

SEPARATORS = {"&&", "||", ";", "|", "&"}
COMMAND_KEYS = {"command", "args", "entrypoint"}


def _tokens(value: Any) -> list[str]:
    """A command as tokens: a list is argv (an element holding spaces is a script of its own, as
    after `bash -c` or `ray job submit --`); a string is a shell line."""
    if isinstance(value, list):
        out: list[str] = []
        for element in value:
            text = str(element)
            if any(ch.isspace() for ch in text):  # a script: its commands end with it
                out.extend([";", *shlex.split(text), ";"])
            else:
                out.append(text)
        return out
    return shlex.split(str(value))


def drydock_commands(tokens: list[str]) -> list[list[str]]:
    """The argument lists of every `drydock ...` in command position."""
    found = []
    for i, token in enumerate(tokens):
        if token != "drydock":
            continue
        if i and tokens[i - 1] not in SEPARATORS | {"--", "exec", "then", "do"} and not tokens[i - 1].endswith(";"):
            continue  # an argument (`-n drydock`), not a command
        args = []
        for t in tokens[i + 1:]:
            if t in SEPARATORS:
                break
            args.append(t.rstrip(";"))
            if t.endswith(";"):
                break
        found.append(args)
    return found


def _walk_commands(node: Any, key: str = "") -> Iterator[Any]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk_commands(v, str(k))
    elif isinstance(node, list) and key not in COMMAND_KEYS and not key.endswith("_commands"):
        for v in node:
            yield from _walk_commands(v, key)
    elif key in COMMAND_KEYS or key.endswith("_commands"):
        if isinstance(node, list) and key.endswith("_commands"):  # launcher: one shell line each
            yield from node
        else:
            yield node


def manifest_command_lines() -> list[tuple[str, list[str]]]:
    lines = []
    for path in MANIFESTS:
        for doc in docs(path):
            for value in _walk_commands(doc):
                for args in drydock_commands(_tokens(value)):
                    lines.append((path.relative_to(ROOT).as_posix(), args))
    return lines


def doc_command_lines() -> list[tuple[str, list[str]]]:
    """`drydock ...` in the specs' first lines and in the README's shell blocks."""
    lines = []
    for spec in SPECS:
        first = spec.read_text().splitlines()[0]
        for args in drydock_commands(shlex.split(first.lstrip("# "))):
            lines.append((spec.relative_to(ROOT).as_posix(), args))
    readme = CLUSTER / "README.md"
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", readme.read_text(), re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                for args in drydock_commands(_tokens(shlex.split(line))):
                    lines.append(("cluster/README.md", args))
    return lines


MANIFEST_COMMANDS = manifest_command_lines()
DOC_COMMANDS = doc_command_lines()


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def parse_drydock(args: list[str]) -> argparse.Namespace:
    """Parse with the real CLI parser; an unknown subcommand or a rejected argument fails."""
    parser = build_parser()
    if args and args[0] not in subcommands(parser):
        known = sorted(subcommands(parser))
        pytest.fail(f"drydock {shlex.join(args)}: unknown subcommand {args[0]!r} (known: {known})")
    try:
        return parser.parse_args(args)
    except SystemExit:
        pytest.fail(f"drydock {shlex.join(args)}: rejected by pipeline.cli.build_parser()")


def repo_path(path: str) -> Path:
    """A path as the image sees it (relative to /opt/drydock, or absolute under it, or under
    /home/ray/drydock where the AWS launcher puts the project) in the repo."""
    for home in (IMAGE_HOME, "/home/ray/drydock"):
        if path.startswith(home + "/"):
            return ROOT / path[len(home) + 1:]
    return ROOT / path


# ----------------------------------------------------------------------------------------------
# every YAML parses; Kubernetes objects have what their kind requires
# ----------------------------------------------------------------------------------------------


def test_the_cluster_folder_has_its_parts():
    assert K8S and LAUNCHER and SPECS and PRESETS
    assert {d["kind"] for _, d in k8s_objects()} >= {"RayCluster", "RayJob", "CronJob", "Deployment", "Service"}
    assert (CLUSTER / "README.md").is_file() and (CLUSTER / "Dockerfile").is_file()


@pytest.mark.parametrize("path", ALL_YAML, ids=lambda p: p.relative_to(CLUSTER).as_posix())
def test_every_yaml_file_parses_into_mappings(path):
    found = docs(path)
    assert found, f"{path.name}: no YAML document"
    assert all(isinstance(d, dict) for d in found), f"{path.name}: every document must be a mapping"


@pytest.mark.parametrize("path", K8S, ids=lambda p: p.name)
def test_kubernetes_objects_have_the_fields_their_kind_requires(path):
    for doc in docs(path):
        kind = doc.get("kind")
        assert kind in API_VERSIONS, f"{path.name}: unexpected kind {kind!r} (a Secret never belongs in the repository)"
        assert doc.get("apiVersion") == API_VERSIONS[kind], f"{path.name}: {kind} needs apiVersion {API_VERSIONS[kind]}"
        name = doc.get("metadata", {}).get("name")
        valid = bool(name) and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
        assert valid, f"{path.name}: {kind} metadata.name {name!r}"
        if kind != "Namespace":
            namespace = doc["metadata"].get("namespace")
            assert namespace == NAMESPACE, f"{path.name}: {kind}/{name} outside namespace {NAMESPACE}"
        if kind not in NO_SPEC_KINDS:
            assert isinstance(doc.get("spec"), dict) and doc["spec"], f"{path.name}: {kind}/{name} has no spec"


@pytest.mark.parametrize("name,spec", ray_cluster_specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_ray_clusters_have_a_head_and_gpu_worker_groups(name, spec):
    head = spec["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict)
    assert head["rayStartParams"].get("num-cpus") == "0", f"{name}: the head runs the driver, never trial workers"
    (head_container,) = head["template"]["spec"]["containers"]
    assert head_container["image"], f"{name}: head image"
    groups = spec["workerGroupSpecs"]
    assert groups, f"{name}: no worker group"
    for group in groups:
        where = f"{name} worker group {group.get('groupName')}"
        assert group["groupName"] and isinstance(group["rayStartParams"], dict)
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], where
        container = group["template"]["spec"]["containers"][0]
        limits, requests = container["resources"]["limits"], container["resources"].get("requests", {})
        assert int(limits["nvidia.com/gpu"]) >= 1, f"{where}: GPU limit"
        gpus = limits["nvidia.com/gpu"]
        assert requests.get("nvidia.com/gpu", gpus) == gpus, f"{where}: GPU request != limit"
        assert container["image"] == head_container["image"], f"{where}: head and workers must run one image"
    assert spec["rayVersion"], f"{name}: rayVersion"


def test_the_long_lived_cluster_autoscales_gpu_workers():
    (cluster,) = of_kind("RayCluster")
    assert cluster["spec"]["enableInTreeAutoscaling"] is True
    assert any(g["maxReplicas"] > g["minReplicas"] for g in cluster["spec"]["workerGroupSpecs"])


def test_ray_version_is_one_across_images_and_manifests():
    versions = {spec["rayVersion"] for _, spec in ray_cluster_specs()}
    dockerfile = RAY_IMAGE.findall((CLUSTER / "Dockerfile").read_text())
    launcher = [RAY_IMAGE.search(d["docker"]["image"]).group(1) for p in LAUNCHER for d in docs(p) if "docker" in d]
    assert len(versions | set(dockerfile) | set(launcher)) == 1, (versions, dockerfile, launcher)


def test_ray_and_drydock_containers_run_the_drydock_image_built_by_the_dockerfile():
    images = {c["image"] for where, c in containers() if "Deployment/" not in where}
    assert images == {"${DRYDOCK_IMAGE}"}, images
    dockerfile = (CLUSTER / "Dockerfile").read_text()
    assert f"WORKDIR {IMAGE_HOME}" in dockerfile, "commands `cd` there and specs are named relative to it"
    assert re.search(rf"DRYDOCK_HOME={IMAGE_HOME}\b", dockerfile), "specs find their presets through DRYDOCK_HOME"
    assert re.search(rf"pip install [^\n]*{IMAGE_HOME}", dockerfile), "the image installs the project"
    import tomllib

    # every package the distribution installs (pyproject's packages.find), read from there: a new
    # one (the `drydock` API, which the command imports) cannot be left out of the image
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted({pattern.rstrip("*") for pattern in found})
    assert {"drydock", "pipeline", "methods"} <= set(packages)
    for part in ("pyproject.toml", *packages, "cluster"):
        assert re.search(rf"^COPY .*\b{part}\b", dockerfile, re.MULTILINE), f"the image lacks {part}"
    assert re.search(r"python -c \"import drydock, pipeline\.cli", dockerfile), "the image's own check imports the API"


def test_ray_pods_mount_the_shared_work_directory_and_a_large_shm():
    for name, spec in ray_cluster_specs():
        pods = [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
        for pod in pods:
            volumes = {v["name"]: v for v in pod["volumes"]}
            mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
            assert SHARED_MOUNT in mounts, f"{name}: the work directory must be mounted at {SHARED_MOUNT}"
            claim = volumes[mounts[SHARED_MOUNT]]["persistentVolumeClaim"]["claimName"]
            (pvc,) = [d for d in of_kind("PersistentVolumeClaim") if d["metadata"]["name"] == claim]
            assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], f"{claim}: trials and the driver share it"
            assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory", name


def test_pods_that_mount_the_work_directory_own_it_through_their_group():
    """Pods run as uid 1000, gid 100 (the image's ray user); a fresh volume's root is root-owned.
    `fsGroup: 100` makes the kubelet hand the volume to that group before the first mkdir where
    its driver applies it (issue #35, item 6: for ReadWriteMany, a CSI driver with `fsGroupPolicy:
    File`); NFS-backed volumes ignore it, and cluster/README.md says how to give them to the group."""
    for where, pod in pod_specs():
        claims = {v["name"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}
        if not claims:
            continue
        context = pod.get("securityContext") or {}
        assert context.get("runAsGroup") == 100 and context.get("fsGroup") == 100, f"{where}: fsGroup 100"
        assert context.get("fsGroupChangePolicy") == "OnRootMismatch", f"{where}: no walk of a large volume at each start"
    readme = (ROOT / "cluster" / "README.md").read_text()
    assert "fsGroup" in readme and "2775" in readme  # the NFS case: a group-writable, setgid root


def test_gpu_worker_groups_land_on_one_gpu_product():
    """A sweep decides `train.bf16: auto` once from the GPU types it finds (`resolve_bf16`), and its
    latencies are comparable only on one kind of GPU: each GPU worker group selects its nodes by
    the product label NVIDIA's GPU feature discovery sets (issue #35, item 4)."""
    groups = 0
    for path in (CLUSTER / "k8s" / "raycluster.yaml", CLUSTER / "k8s" / "rayjob-sweep.yaml"):
        for doc in docs(path):
            spec = doc.get("spec", {})
            spec = spec.get("rayClusterSpec", spec)
            for group in spec.get("workerGroupSpecs", []):
                pod = group["template"]["spec"]
                if not any("nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in pod["containers"]):
                    continue
                groups += 1
                assert pod.get("nodeSelector") == {"nvidia.com/gpu.product": "${DRYDOCK_GPU_PRODUCT}"}, f"{path.name}: {group['groupName']}"
    assert groups == 2
    assert "nvidia.com/gpu.product" in (CLUSTER / "README.md").read_text()


def test_the_head_gives_the_driver_tracking_and_storage_settings():
    (service,) = [s for s in of_kind("Service") if s["metadata"]["name"] == "mlflow"]
    port = service["spec"]["ports"][0]["port"]
    server = f"http://{service['metadata']['name']}.{NAMESPACE}.svc.cluster.local:{port}"
    for name, spec in ray_cluster_specs():
        env = env_by_name(spec["headGroupSpec"]["template"]["spec"]["containers"][0])
        assert env["MLFLOW_TRACKING_URI"]["value"] == server, name
        assert from_secret(env["MLFLOW_TRACKING_USERNAME"]) and from_secret(env["MLFLOW_TRACKING_PASSWORD"]), name
        assert env["DRYDOCK_STORAGE_PATH"]["value"].startswith(("s3://", "gs://")), name
    for spec in SPECS:  # the specs' default tracking URI is that Service too
        assert server in spec.read_text(), f"{spec.name}: tracking.uri default should be {server}"


def test_rayjob_runs_a_sweep_and_cleans_up():
    for job in of_kind("RayJob"):
        spec = job["spec"]
        assert "drydock sweep" in spec["entrypoint"]
        assert spec["shutdownAfterJobFinishes"] is True
        assert "rayClusterSpec" in spec or "clusterSelector" in spec


CRON_FIELD = r"(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*"


def test_cronjob_retrains_on_a_schedule_through_the_long_lived_cluster():
    (cron,) = of_kind("CronJob")
    spec = cron["spec"]
    fields = spec["schedule"].split()
    assert len(fields) == 5 and all(re.fullmatch(CRON_FIELD, f) for f in fields), spec["schedule"]
    assert spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    (container,) = pod["containers"]
    tokens = _tokens(container["command"] + container.get("args", []))
    assert [args[0] for args in drydock_commands(tokens)] == ["retrain"]
    (cluster,) = of_kind("RayCluster")
    head = f"http://{cluster['metadata']['name']}-head-svc.{NAMESPACE}.svc.cluster.local:8265"
    assert tokens[:3] == ["ray", "job", "submit"] and tokens[tokens.index("--address") + 1] == head


def test_mlflow_server_uses_postgres_object_store_and_basic_auth():
    (deployment,) = of_kind("Deployment")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    argv = " ".join(container.get("command", []) + container.get("args", []))
    assert argv.startswith("mlflow server")
    assert re.search(r"--app-name[= ]basic-auth\b", argv), "the server must authenticate"
    assert re.search(r"--backend-store-uri[= ]postgresql://", argv)
    assert re.search(r"--artifacts-destination[= ](s3|gs)://", argv)
    env = env_by_name(container)
    for name in ("PGPASSWORD", "MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY"):
        assert from_secret(env[name]), f"{name} must come from a secret"
    for source in container.get("envFrom", []):
        assert set(source) <= {"secretRef", "prefix"}, "envFrom: secrets only"
    (service,) = [s for s in of_kind("Service") if s["metadata"]["name"] == "mlflow"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert all(p["targetPort"] in ports or p["targetPort"] in ports.values() for p in service["spec"]["ports"])
    probes = [container[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")]
    assert probes == ["/health", "/health"], "basic-auth leaves only /health open to kubelet probes"


def test_credentials_in_any_container_come_from_secrets_only():
    for where, container in containers():
        for entry in container.get("env", []):
            if SENSITIVE_ENV.search(entry["name"]):
                assert from_secret(entry), f"{where}: {entry['name']} must use valueFrom.secretKeyRef"
        for source in container.get("envFrom", []):
            assert "secretRef" in source or "configMapRef" in source, where


# ----------------------------------------------------------------------------------------------
# the Ray cluster launcher config
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", LAUNCHER, ids=lambda p: p.name)
def test_launcher_config_has_head_and_autoscaling_gpu_workers(path):
    (config,) = docs(path)
    assert config["cluster_name"] and config["provider"]["type"]
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    workers = {k: v for k, v in types.items() if k != config["head_node_type"]}
    assert any(v["resources"].get("GPU", 0) >= 1 and v["max_workers"] > v["min_workers"] for v in workers.values())
    for name, node in types.items():
        assert node["node_config"] and "resources" in node, name
        assert 0 <= node["min_workers"] <= node["max_workers"] <= config["max_workers"], name
    assert types[config["head_node_type"]]["resources"].get("CPU") == 0, "the head runs the driver, never trial workers"
    installs = " ".join(config.get("setup_commands", []))
    assert "pip install" in installs and "drydock" in installs, "the project must be installed on every node"
    assert any(mount == "/home/ray/drydock" for mount in config["file_mounts"])
    assert any(SHARED_MOUNT in opt for opt in config["docker"]["run_options"]), "the work directory must be shared"


# ----------------------------------------------------------------------------------------------
# command lines, files they name, placeholders
# ----------------------------------------------------------------------------------------------


def test_manifests_run_drydock():
    subs = {args[0] for _, args in MANIFEST_COMMANDS if args}
    assert {"sweep", "retrain"} <= subs, subs


@pytest.mark.parametrize("where,args", MANIFEST_COMMANDS + DOC_COMMANDS,
                         ids=[f"{w}: drydock {' '.join(a[:2])}" for w, a in MANIFEST_COMMANDS + DOC_COMMANDS])
def test_drydock_command_lines_parse_and_name_existing_specs(where, args):
    namespace = parse_drydock(args)
    spec = getattr(namespace, "spec", None)
    if spec is not None:
        assert repo_path(spec).is_file(), f"{where}: drydock {' '.join(args)}: {spec} is not in the repository"
    workdir = getattr(namespace, "workdir", None)
    if workdir is not None and where.startswith(("cluster/k8s", "cluster/ray", "cluster/specs")):
        assert str(workdir).startswith(SHARED_MOUNT), f"{where}: the work directory must be on the shared volume"


FILE_REFERENCE = re.compile(r"(?<![\w-])((?:cluster|sweeps)/[\w.-]+(?:/[\w.-]+)*\.(?:ya?ml|json))")


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: p.relative_to(CLUSTER).as_posix())
def test_every_spec_and_preset_named_in_cluster_files_exists(path):
    for ref in FILE_REFERENCE.findall(path.read_text(errors="replace")):
        assert (ROOT / ref).is_file(), f"{path.relative_to(ROOT)} names {ref}, which is not in the repository"


PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


def test_manifest_placeholders_are_documented_drydock_variables():
    readme = (CLUSTER / "README.md").read_text()
    for path in MANIFESTS + IAM_POLICIES:
        for name in PLACEHOLDER.findall(path.read_text()):
            ours = re.fullmatch(r"DRYDOCK_[A-Z0-9_]+", name)
            assert ours, f"{path.name}: ${{{name}}} (render.sh fills DRYDOCK_* only)"
            assert name in readme, f"{path.name}: ${{{name}}} is not explained in cluster/README.md"


@pytest.mark.skipif(shutil.which("envsubst") is None, reason="envsubst (GNU gettext) is not installed")
@pytest.mark.parametrize("path", MANIFESTS + IAM_POLICIES, ids=lambda p: p.name)
def test_render_fills_every_placeholder(path, tmp_path):
    names = sorted(set(PLACEHOLDER.findall(path.read_text())))
    env = {"PATH": "/usr/bin:/bin", **{n: f"value-of-{n.lower()}" for n in names}}
    render = ["bash", str(CLUSTER / "render.sh"), str(path)]
    done = subprocess.run(render, check=False, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "${DRYDOCK_" not in done.stdout and yaml.safe_load_all(done.stdout)
    assert len(list(yaml.safe_load_all(done.stdout))) == len(docs(path))
    if names:  # an unset variable stops rendering
        env.pop(names[0])
        missing = subprocess.run(render, check=False, capture_output=True, text=True, env=env)
        assert missing.returncode == 2 and names[0] in missing.stderr and not missing.stdout


# ----------------------------------------------------------------------------------------------
# the example specs
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_gpu_specs_validate_without_any_environment(path, monkeypatch):
    for name in ("DRYDOCK_HOME", "DRYDOCK_STORAGE_PATH", "MLFLOW_TRACKING_URI", "GLUE_DIR"):
        monkeypatch.delenv(name, raising=False)
    spec = load_spec(path)  # a hub teacher is a name here: validation downloads nothing
    assert path.read_text().startswith("# drydock "), f"{path.name} must start with the command that runs it"
    r = spec.resources
    assert r.use_gpu and r.workers_per_trial >= 2 and r.gpus_per_worker >= 1
    assert r.storage_path.startswith(("s3://", "gs://")), "checkpoints and Tune state go to the object store"
    assert spec.tracking.uri.startswith(("http://", "https://")), "the tracking server, not a sqlite file"
    if r.strategy == "deepspeed" and r.deepspeed.preset:
        assert r.deepspeed.preset.startswith(IMAGE_HOME + "/"), "the driver reads the preset where the image keeps it"


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_gpu_spec_presets_exist_and_agree_with_the_zero_stage(path, monkeypatch):
    monkeypatch.setenv("DRYDOCK_HOME", str(ROOT))
    spec = load_spec(path)
    ds = spec.resources.deepspeed
    if spec.resources.strategy != "deepspeed" or not ds.preset:
        pytest.skip("no DeepSpeed preset")
    preset = Path(ds.preset)
    assert preset.is_file() and preset.parent == CLUSTER / "deepspeed"
    # drydock refuses a preset whose ZeRO stage differs from the spec's, before any work starts
    assert json.loads(preset.read_text())["zero_optimization"]["stage"] == ds.zero_stage


# ----------------------------------------------------------------------------------------------
# DeepSpeed presets
# ----------------------------------------------------------------------------------------------

# What pipeline.training.engine.deepspeed_config sets itself (a preset's value would be silently replaced),
# and what must not be in a preset: the loop passes its own optimizer and LR schedule (a config
# optimizer or scheduler would be ignored), never scales an fp16 loss, and a client optimizer
# with ZeRO-Offload raises unless DeepSpeed's CPU Adam is used.
LOOP_OWNED = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
              "zero_allow_untested_optimizer", "steps_per_print", "wall_clock_breakdown"}
UNSUPPORTED = {"optimizer", "scheduler", "fp16", "amp"}


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_preset_parses_and_has_the_stage_and_precision_its_name_claims(path):
    preset = json.loads(path.read_text())
    match = re.fullmatch(r"zero([0-3])(-bf16)?\.json", path.name)
    assert match, f"{path.name}: name presets zero<stage>[-bf16].json"
    assert preset["zero_optimization"]["stage"] == int(match.group(1))
    assert preset.get("bf16", {}).get("enabled", False) is bool(match.group(2))
    assert not (LOOP_OWNED | UNSUPPORTED) & preset.keys(), f"{path.name}: {(LOOP_OWNED | UNSUPPORTED) & preset.keys()}"
    zero = preset["zero_optimization"]
    assert "offload_optimizer" not in zero and "offload_param" not in zero, "the loop's client optimizer cannot offload"


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_preset_merged_by_the_loop_is_a_valid_deepspeed_config(path):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    from pipeline.config import TrainConfig
    from pipeline.training.engine import Distributed, deepspeed_config

    preset = json.loads(path.read_text())
    stage = preset["zero_optimization"]["stage"]
    dist = Distributed(strategy="deepspeed", world_size=1, zero_stage=stage, deepspeed_preset=preset)
    merged = deepspeed_config(TrainConfig(batch_size=32), dist, micro_batch=32)
    assert merged["zero_optimization"] == preset["zero_optimization"]  # the preset's ZeRO settings survive
    config = DeepSpeedConfig(merged)  # its schema rejects unknown or mistyped ZeRO / bf16 keys
    assert config.zero_optimization_stage == stage
    for switch, enabled in (("on", True), ("off", False)):  # train.bf16 decides, whatever the preset says
        merged = deepspeed_config(TrainConfig(batch_size=32, bf16=switch), dist, micro_batch=32)
        assert DeepSpeedConfig(merged).bfloat16_config.enabled is enabled
        # gradients accumulate in fp32 as under DDP's autocast, where DeepSpeed allows it (stages 1-3)
        accumulated_in = DeepSpeedConfig(merged).grad_accum_dtype
        assert accumulated_in == ("fp32" if enabled and stage >= 1 and "data_types" not in preset else preset.get(
            "data_types", {}).get("grad_accum_dtype"))


# ----------------------------------------------------------------------------------------------
# security: service accounts and cloud roles, NetworkPolicies, Ray token auth, securityContext,
# the database's certificate (cluster/README.md, section 8)
# ----------------------------------------------------------------------------------------------

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
CLOUD_ROLE_ANNOTATIONS = ("eks.amazonaws.com/role-arn", "iam.gke.io/gcp-service-account")
RAY_TOKEN_AUTH_MIN = (2, 52, 0)  # KubeRay refuses authOptions.mode token below it (utils/validation.go)
KUBERAY_TOKEN_KEY = "auth_token"  # the key KubeRay reads RAY_AUTH_TOKEN from (utils/constant.go)
IAM = CLUSTER / "iam"
S3_WRITES = ("s3:PutObject", "s3:DeleteObject")


def service_accounts() -> dict[str, dict[str, Any]]:
    return {sa["metadata"]["name"]: sa for sa in of_kind("ServiceAccount")}


def cloud_role(sa: dict[str, Any]) -> str | None:
    annotations = sa.get("metadata", {}).get("annotations") or {}
    roles = [annotations[a] for a in CLOUD_ROLE_ANNOTATIONS if a in annotations]
    return roles[0] if roles else None


def template_labels(template: dict[str, Any]) -> dict[str, str]:
    return dict((template.get("metadata") or {}).get("labels") or {})


def ray_pods(spec: dict[str, Any]) -> tuple[tuple[dict[str, str], dict[str, Any]], list[tuple[dict[str, str], dict[str, Any]]]]:
    """(labels, pod spec) of a Ray cluster's head and of each worker group, with the labels KubeRay
    itself puts on every pod (ray.io/node-type, ray.io/group: labelPod in common/pod.go)."""
    head = spec["headGroupSpec"]["template"]
    head_labels = {**template_labels(head), "ray.io/node-type": "head", "ray.io/group": "headgroup"}
    workers = [({**template_labels(g["template"]), "ray.io/node-type": "worker", "ray.io/group": g["groupName"]},
                g["template"]["spec"]) for g in spec["workerGroupSpecs"]]
    return (head_labels, head["spec"]), workers


def submitters_of(name: str) -> list[dict[str, str]]:
    """Labels of the pods that submit jobs to the Ray cluster `name` (RayCluster/x or RayJob/x):
    a RayJob's own submitter pod; the CronJobs whose `ray job submit --address` is the cluster's head."""
    kind, short = name.split("/")
    if kind == "RayJob":
        (job,) = [j for j in of_kind("RayJob") if j["metadata"]["name"] == short]
        return [template_labels(job["spec"]["submitterPodTemplate"])]
    head = f"http://{short}-head-svc.{NAMESPACE}.svc.cluster.local:8265"
    found = []
    for cron in of_kind("CronJob"):
        template = cron["spec"]["jobTemplate"]["spec"]["template"]
        tokens = _tokens(template["spec"]["containers"][0].get("command", []))
        if "--address" in tokens and tokens[tokens.index("--address") + 1] == head:
            found.append(template_labels(template))
    return found


def mlflow_pod_labels() -> dict[str, str]:
    (deployment,) = of_kind("Deployment")
    return template_labels(deployment["spec"]["template"])


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against labels."""
    selector = selector or {}
    if any(labels.get(k) != str(v) for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], [str(v) for v in e.get("values", [])]
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class Peer:
    """A pod that opens a connection: its labels and its namespace's labels."""

    labels: dict[str, str]
    namespace: str = NAMESPACE
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def ns_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


def _peer_matches(rule_peer: dict[str, Any], peer: Peer) -> bool:
    assert "ipBlock" not in rule_peer, "an ipBlock admits addresses, not the cluster's own pods: use selectors"
    if "namespaceSelector" in rule_peer:
        if not _selects(rule_peer["namespaceSelector"], peer.ns_labels()):
            return False
    elif peer.namespace != NAMESPACE:  # a podSelector alone selects pods of the policy's namespace
        return False
    return _selects(rule_peer.get("podSelector"), peer.labels) if "podSelector" in rule_peer else True


def _port_matches(rule: dict[str, Any], port: int, named: dict[int, str]) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    return any(p.get("protocol", "TCP") == "TCP" and p.get("port") in (port, named.get(port)) for p in ports)


def isolated(labels: dict[str, str]) -> bool:
    return any(_selects(p["spec"]["podSelector"], labels) and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
               for p in of_kind("NetworkPolicy"))


def admitted(target: dict[str, str], peer: Peer, port: int, named: dict[int, str] | None = None) -> bool:
    """Kubernetes' rule: a pod that some policy isolates for ingress accepts a connection when any
    ingress rule of any policy selecting it admits the peer on that port."""
    if not isolated(target):
        return True
    for policy in of_kind("NetworkPolicy"):
        spec = policy["spec"]
        if not _selects(spec["podSelector"], target):
            continue
        for rule in spec.get("ingress") or []:
            peers = rule.get("from")
            if (not peers or any(_peer_matches(p, peer) for p in peers)) and _port_matches(rule, port, named or {}):
                return True
    return False


def container_ports(pod: dict[str, Any]) -> dict[int, str]:
    return {p["containerPort"]: p.get("name", "") for p in pod["containers"][0].get("ports", [])}


# Ports a Ray pod listens on besides those it names: the Ray Client server, the dashboard agent,
# metrics, the object manager and node manager, and worker processes (10002-19999 by default).
RAY_PORTS = [6379, 8265, 10001, 52365, 8080, 8076, 44217, 10002, 19999]
STRANGERS = [
    Peer({"app": "something-else"}),  # any other pod of the namespace
    Peer({}, namespace="default"),  # a pod elsewhere in the cluster
    Peer({"app.kubernetes.io/name": "kuberay-operator"}, namespace="default"),  # not the operator's namespace
]


def test_the_network_policy_evaluator_itself(monkeypatch):
    """`admitted` follows Kubernetes: an unselected pod is open; a podSelector alone is the policy's
    namespace; namespaceSelector + podSelector in one peer is AND; rules and policies are OR."""
    policies = [
        {"spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"], "ingress": [
            {"from": [{"podSelector": {"matchLabels": {"role": "api"}}}], "ports": [{"port": 5432}]},
            {"from": [{"namespaceSelector": {"matchLabels": {"team": "ops"}},
                       "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["admin"]}]}}]},
        ]}},
        {"spec": {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [
            {"from": [{"podSelector": {"matchLabels": {"role": "backup"}}}], "ports": [{"port": "pg"}]}]}},
    ]
    monkeypatch.setitem(globals(), "of_kind", lambda kind: policies if kind == "NetworkPolicy" else [])
    db, named = {"app": "db"}, {5432: "pg"}
    assert admitted({"app": "web"}, Peer({}, namespace="elsewhere"), 1)  # no policy selects it
    assert admitted(db, Peer({"role": "api"}), 5432) and not admitted(db, Peer({"role": "api"}), 22)
    assert not admitted(db, Peer({"role": "api"}, namespace="other"), 5432)  # podSelector alone: same namespace
    assert admitted(db, Peer({"tier": "admin"}, namespace="x", namespace_labels={"team": "ops"}), 22)
    assert not admitted(db, Peer({"tier": "admin"}, namespace="x"), 22)  # both selectors must match
    assert not admitted(db, Peer({"tier": "dev"}, namespace="x", namespace_labels={"team": "ops"}), 22)
    assert admitted(db, Peer({"role": "backup"}), 5432, named) and not admitted(db, Peer({"role": "backup"}), 80, named)
    assert not admitted(db, Peer({}), 5432)


def labelled_pods() -> Iterator[tuple[str, dict[str, str]]]:
    """Every pod template of the manifests with the labels its pods will carry."""
    for name, spec in ray_cluster_specs():
        (head, _), workers = ray_pods(spec)
        yield f"{name} head", head
        yield from ((f"{name} {labels['ray.io/group']}", labels) for labels, _ in workers)
    for job in of_kind("RayJob"):
        yield f"RayJob/{job['metadata']['name']} submitter", template_labels(job["spec"]["submitterPodTemplate"])
    for cron in of_kind("CronJob"):
        yield f"CronJob/{cron['metadata']['name']}", template_labels(cron["spec"]["jobTemplate"]["spec"]["template"])
    yield "Deployment/mlflow", mlflow_pod_labels()


def test_every_pod_is_isolated_for_ingress_by_a_network_policy():
    """base.yaml denies all ingress in the namespace; each component's own policy opens what it needs."""
    assert of_kind("NetworkPolicy"), "no NetworkPolicy: every port of every pod is open to the whole cluster"
    for where, labels in labelled_pods():
        assert isolated(labels), f"{where}: no NetworkPolicy isolates it for ingress"
    for policy in of_kind("NetworkPolicy"):
        for rule in policy["spec"].get("ingress") or []:
            assert rule.get("from"), f"NetworkPolicy/{policy['metadata']['name']}: a rule without `from` admits everyone"


@pytest.mark.parametrize("name,spec", ray_cluster_specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_ray_heads_ports_admit_only_the_clusters_own_pods_and_its_submitter(name, spec):
    (head, head_pod), workers = ray_pods(spec)
    named = container_ports(head_pod)
    dashboard = next(port for port, n in named.items() if n == "dashboard")
    assert isolated(head), f"{name}: no NetworkPolicy selects the Ray head"
    submitters = submitters_of(name)
    assert submitters, f"{name}: nothing submits to it"
    others = [lbl for other, s in ray_cluster_specs() if other != name for lbl in
              [ray_pods(s)[0][0]] + [w for w, _ in ray_pods(s)[1]]]
    for port in sorted(set(RAY_PORTS) | set(named)):
        for worker, _ in workers:
            assert admitted(head, Peer(worker), port, named), f"{name}: its workers cannot reach the head's port {port}"
        for submitter in submitters:
            assert admitted(head, Peer(submitter), port, named) is (port == dashboard), (
                f"{name}: the submitter may reach the job API ({dashboard}) and nothing else (port {port})")
        for stranger in [*STRANGERS, Peer(mlflow_pod_labels()), *(Peer(o) for o in others)]:
            assert not admitted(head, stranger, port, named), f"{name}: {stranger} reaches the head's port {port}"
    if name.startswith("RayJob/"):  # KubeRay's operator reads the job's status from the dashboard
        (job,) = [j for j in of_kind("RayJob") if j["metadata"]["name"] == name.split("/")[1]]
        operator = Peer({"app.kubernetes.io/name": "kuberay-operator"}, namespace="${DRYDOCK_KUBERAY_NAMESPACE}")
        assert admitted(head, operator, dashboard, named), f"{name}: the KubeRay operator cannot read the job's status"
        assert not admitted(head, operator, 6379, named), f"{name}: the operator needs the job API only"


@pytest.mark.parametrize("name,spec", ray_cluster_specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_ray_workers_admit_only_their_own_cluster(name, spec):
    (head, _), workers = ray_pods(spec)
    for worker, _ in workers:
        assert isolated(worker), f"{name} {worker['ray.io/group']}: no NetworkPolicy selects the workers"
        for port in RAY_PORTS:
            assert admitted(worker, Peer(head), port) and admitted(worker, Peer(worker), port), (name, port)
            for stranger in [*STRANGERS, Peer(mlflow_pod_labels()), *(Peer(s) for s in submitters_of(name))]:
                assert not admitted(worker, stranger, port), f"{name}: {stranger} reaches a worker's port {port}"


def test_the_tracking_server_admits_the_drivers_not_the_workers():
    (service,) = [s for s in of_kind("Service") if s["metadata"]["name"] == "mlflow"]
    port = service["spec"]["ports"][0]["port"]
    mlflow = mlflow_pod_labels()
    assert isolated(mlflow), "no NetworkPolicy selects the MLflow server"
    for name, spec in ray_cluster_specs():
        (head, _), workers = ray_pods(spec)
        assert admitted(mlflow, Peer(head), port), f"{name}: the driver on the head cannot reach MLflow"
        for worker, _ in workers:  # workers never call MLflow (cluster/README.md, "who needs what")
            assert not admitted(mlflow, Peer(worker), port), f"{name}: its workers reach MLflow"
        for submitter in submitters_of(name):
            assert not admitted(mlflow, Peer(submitter), port), f"{name}: its submitter reaches MLflow"
    for stranger in STRANGERS:
        assert not admitted(mlflow, stranger, port), f"{stranger} reaches MLflow"


def test_the_ray_dashboard_and_job_api_stay_inside_the_cluster():
    for service in of_kind("Service"):
        assert service["spec"].get("type", "ClusterIP") == "ClusterIP", service["metadata"]["name"]
    for name, spec in ray_cluster_specs():
        head = spec["headGroupSpec"]
        assert head.get("serviceType", "ClusterIP") == "ClusterIP", f"{name}: the head Service must stay in-cluster"
        assert not head.get("enableIngress"), f"{name}: no Ingress to the dashboard"
        names = set(container_ports(head["template"]["spec"]).values())
        assert names <= {"gcs", "dashboard"}, f"{name}: the head Service exposes {names}: drydock uses no Ray Client"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def test_ray_token_authentication_is_on_for_every_cluster_and_the_cronjob_carries_the_token():
    secrets = {}
    for name, spec in ray_cluster_specs():
        auth = spec.get("authOptions") or {}
        assert auth.get("mode") == "token", f"{name}: authOptions.mode must be token (Ray's token authentication)"
        assert _version(spec["rayVersion"]) >= RAY_TOKEN_AUTH_MIN, f"{name}: token auth needs Ray >= 2.52"
        secrets[name] = auth.get("secretName")
    for cron in of_kind("CronJob"):
        (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        env = env_by_name(container)
        tokens = _tokens(container["command"])
        cluster = tokens[tokens.index("--address") + 1].split("//")[1].split("-head-svc")[0]
        secret = secrets[f"RayCluster/{cluster}"]
        assert secret, f"RayCluster/{cluster}: name authOptions.secretName, which the CronJob (not KubeRay's) reads"
        assert env.get("RAY_AUTH_MODE", {}).get("value") == "token", "the CronJob's `ray job submit` must send the token"
        ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == (secret, KUBERAY_TOKEN_KEY), ref


def test_the_installed_ray_has_the_token_authentication_the_manifests_turn_on():
    """What the manifests rely on, in the installed Ray (the image's version)."""
    found = importlib.util.find_spec("ray")
    if found is None or found.origin is None:
        pytest.skip("ray is not installed")
    ray_root = Path(found.origin).parent
    setup = (ray_root / "_private" / "authentication" / "authentication_token_setup.py").read_text()
    assert 'AUTH_MODE_ENV_VAR = "RAY_AUTH_MODE"' in setup
    head = (ray_root / "dashboard" / "http_server_head.py").read_text()
    assert "get_token_auth_middleware(" in head, "the dashboard (and its job API) no longer checks the token"
    assert '"/api/gcs_healthz"' in head, "KubeRay's submitter polls /api/gcs_healthz before it submits: must stay open"
    sdk = (ray_root / "dashboard" / "modules" / "dashboard_sdk.py").read_text()
    assert "get_auth_headers_if_auth_enabled" in sdk, "`ray job submit` no longer sends RAY_AUTH_TOKEN"
    assert _version(ray_version()) >= RAY_TOKEN_AUTH_MIN


def ray_version() -> str:
    (version,) = {spec["rayVersion"] for _, spec in ray_cluster_specs()}
    return version


def test_each_kind_of_pod_has_its_own_service_account_and_cloud_role():
    accounts = service_accounts()
    (deployment,) = of_kind("Deployment")
    mlflow_sa = deployment["spec"]["template"]["spec"].get("serviceAccountName")
    ray_sas, submitter_sas = set(), set()
    for name, spec in ray_cluster_specs():
        (_, head), workers = ray_pods(spec)
        ray_sas |= {head.get("serviceAccountName")} | {w.get("serviceAccountName") for _, w in workers}
        if spec.get("enableInTreeAutoscaling"):  # KubeRay binds the autoscaler's Role to the head's account
            assert all(w.get("serviceAccountName") != head.get("serviceAccountName") for _, w in workers), (
                f"{name}: workers must not share the head's account, which may create and delete pods")
    for where, pod in pod_specs():
        if "submitter" in where or where.startswith("CronJob/"):
            submitter_sas.add(pod.get("serviceAccountName"))
    for sa in {mlflow_sa} | ray_sas | submitter_sas:
        assert sa in accounts, f"service account {sa!r} is not defined in base.yaml (None: the namespace's default)"
    assert mlflow_sa not in ray_sas | submitter_sas, "the MLflow server's account (its bucket role) is shared"
    mlflow_role = cloud_role(accounts[mlflow_sa])
    ray_roles = {cloud_role(accounts[sa]) for sa in ray_sas}
    assert mlflow_role and None not in ray_roles, "the MLflow server and the Ray pods each need a cloud role"
    assert mlflow_role not in ray_roles, "the MLflow server and the Ray pods must have different cloud roles"
    for sa in submitter_sas:
        assert cloud_role(accounts[sa]) is None, f"{sa}: a submitter needs no bucket access"
    for name, sa in accounts.items():
        assert sa.get("automountServiceAccountToken") is False, f"{name}: pods get no Kubernetes API token by default"


def test_only_the_autoscaler_holds_a_kubernetes_api_token():
    for where, pod in pod_specs():
        assert pod.get("automountServiceAccountToken") is not True, f"{where}: mounts a Kubernetes API token"
        for c in pod["containers"] + pod.get("initContainers", []):
            mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
            assert TOKEN_PATH not in mounts, f"{where} {c['name']}: holds a Kubernetes API token"
    for name, spec in ray_cluster_specs():
        if not spec.get("enableInTreeAutoscaling"):
            continue
        options = spec["autoscalerOptions"]
        (mount,) = [m for m in options.get("volumeMounts", []) if m["mountPath"] == TOKEN_PATH]
        volumes = {v["name"]: v for v in spec["headGroupSpec"]["template"]["spec"]["volumes"]}
        sources = volumes[mount["name"]]["projected"]["sources"]
        assert any("serviceAccountToken" in s for s in sources), f"{name}: the autoscaler needs its token"


def _iam(name: str) -> dict[str, Any]:
    return json.loads((IAM / name).read_text())


def _statements(policy: dict[str, Any], effect: str) -> list[dict[str, Any]]:
    statements = policy["Statement"]
    return [s for s in (statements if isinstance(statements, list) else [statements]) if s["Effect"] == effect]


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _object_grants(policy: dict[str, Any], effect: str, actions: tuple[str, ...]) -> list[str]:
    """The object ARN patterns on which the policy's `effect` statements cover any of `actions`."""
    found = []
    for s in _statements(policy, effect):
        if any(fnmatch.fnmatchcase(a, pattern) for a in actions for pattern in _listed(s["Action"])):
            found += [r for r in _listed(s["Resource"]) if "/" in r or r == "*"]
    return found


def _s3_object(uri: str) -> str:
    """s3://bucket/prefix → the ARN of an object under it."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return f"arn:aws:s3:::{bucket}/{prefix.strip('/')}/some/object"


def test_the_tracking_server_alone_writes_its_artifact_prefix_and_ray_only_the_sweep_storage():
    (deployment,) = of_kind("Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    artifacts = _s3_object(next(a.split("=", 1)[1] for a in args if a.startswith("--artifacts-destination=")))
    mlflow, ray = _iam("mlflow-s3-policy.json"), _iam("ray-s3-policy.json")
    mlflow_writes = _object_grants(mlflow, "Allow", S3_WRITES)
    assert any(fnmatch.fnmatchcase(artifacts, r) for r in mlflow_writes), "the server cannot write its artifacts"
    prefix = artifacts.removesuffix("some/object")
    assert all(r.startswith(prefix) for r in mlflow_writes), f"the server's role writes beyond {prefix}: {mlflow_writes}"
    ray_writes = _object_grants(ray, "Allow", S3_WRITES)
    assert not any(fnmatch.fnmatchcase(artifacts, r) for r in ray_writes), "Ray pods may write MLflow's artifacts"
    assert any(fnmatch.fnmatchcase(artifacts, r) for r in _object_grants(ray, "Deny", ("s3:GetObject", *S3_WRITES)))
    sweep = {env_by_name(spec["headGroupSpec"]["template"]["spec"]["containers"][0])["DRYDOCK_STORAGE_PATH"]["value"]
             for _, spec in ray_cluster_specs()}
    readme = (CLUSTER / "README.md").read_text()
    sweep |= set(re.findall(r"--workdir (s3://\S+)", readme))  # the URI work location (section 7)
    for uri in sweep:
        obj = _s3_object(uri.replace("$DRYDOCK_BUCKET", "${DRYDOCK_BUCKET}"))
        for action in ("s3:GetObject", *S3_WRITES):
            assert any(fnmatch.fnmatchcase(obj, r) for r in _object_grants(ray, "Allow", (action,))), (uri, action)


def _writable(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    return [m["mountPath"] for m in container.get("volumeMounts", [])
            if "emptyDir" in volumes.get(m["name"], {}) and not m.get("readOnly")]


def _check_container_context(where: str, context: dict[str, Any]) -> None:
    assert context.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation: false"
    assert not context.get("privileged"), f"{where}: privileged"
    assert context.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem: true"
    capabilities = context.get("capabilities") or {}
    assert "ALL" in capabilities.get("drop", []) and not capabilities.get("add"), f"{where}: capabilities: drop ALL"


def test_every_pod_runs_as_non_root_without_privileges_on_a_read_only_root():
    for where, pod in pod_specs():
        context = pod.get("securityContext") or {}
        assert context.get("runAsNonRoot") is True and context.get("runAsUser", 1000) != 0, f"{where}: runAsNonRoot"
        assert (context.get("seccompProfile") or {}).get("type") == "RuntimeDefault", f"{where}: seccompProfile"
        assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), f"{where}: host namespaces"
        assert not any("hostPath" in v for v in pod.get("volumes", [])), f"{where}: hostPath volume"
        for c in pod.get("initContainers", []) + pod["containers"]:
            _check_container_context(f"{where} container {c['name']}", c.get("securityContext") or {})
            writable = _writable(pod, c)
            assert "/tmp" in writable, f"{where} {c['name']}: a read-only root needs an emptyDir at /tmp"
            home = env_by_name(c).get("HOME", {}).get("value", "")
            assert any(home == w or home.startswith(w + "/") for w in writable), (
                f"{where} {c['name']}: HOME ({home or 'the image default'}) must be writable: caches and configs go there")
    for name, spec in ray_cluster_specs():
        if spec.get("enableInTreeAutoscaling"):  # KubeRay's autoscaler sidecar in the head pod
            _check_container_context(f"{name} autoscaler", spec["autoscalerOptions"].get("securityContext") or {})


def test_the_tracking_server_verifies_the_databases_certificate():
    (deployment,) = of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (config,) = [c for c in of_kind("ConfigMap") if c["metadata"]["name"] == "mlflow-auth"]
    ini = configparser.ConfigParser()
    ini.read_string(config["data"]["basic_auth.ini"])
    backend = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--backend-store-uri="))
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    for uri in (backend, ini["mlflow"]["database_uri"]):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query)
        assert query.get("sslmode") == ["verify-full"], f"{uri}: sslmode=verify-full checks the certificate and the host"
        (ca,) = query["sslrootcert"]
        (volume,) = [v for path, v in mounts.items() if ca.startswith(path.rstrip("/") + "/")]
        assert "configMap" in volume or "secret" in volume, f"{ca}: the CA bundle comes from a ConfigMap or secret"
    env = env_by_name(container)
    assert env.get("PGSSLMODE", {}).get("value", "verify-full") == "verify-full"


def test_the_readme_explains_each_account_policy_and_setting():
    readme = (CLUSTER / "README.md").read_text()
    match = re.search(r"^## \d+\. Security\n(.*?)(?=^## |\Z)", readme, re.DOTALL | re.MULTILINE)
    assert match, "cluster/README.md has no Security section"
    section = match.group(1)
    names = set(service_accounts()) | {p["metadata"]["name"] for p in of_kind("NetworkPolicy")}
    names |= {f"iam/{p.name}" for p in IAM.glob("*.json")}
    names |= {"authOptions", "RAY_AUTH_TOKEN", "verify-full", "MLFLOW_TRACKING_SERVER_CERT_PATH", "readOnlyRootFilesystem"}
    missing = sorted(n for n in names if n not in section)
    assert not missing, f"the Security section does not mention {missing}"


# ----------------------------------------------------------------------------------------------
# no credential anywhere under cluster/
# ----------------------------------------------------------------------------------------------

SECRET_ASSIGNMENT = re.compile(
    r"(?i)(?P<key>[\w.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key)[\w.-]*)"
    r"[ \t]*[:=][ \t]*(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,;#}\]]+)"
)
URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://[^\s:/@'\"]+:(?P<password>[^\s@/'\"]+)@")
KEY_FORMATS = re.compile(
    r"AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|hf_[A-Za-z0-9]{30,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9]{32,}"
)
# keys that name a secret rather than hold one, and AWS's service prefix in IAM action names
REFERENCE_KEY = re.compile(r"(?i)(ref|name|names|path|file|id|arn|_env|-env)$|^secretsmanager$")


def _placeholder(value: str) -> bool:
    v = value.strip("\"'`")
    return (v == "" or v.startswith("$") or v.lower() in {"true", "false", "null", "none", "~"} or v.isdigit()
            or set(v) <= {".", "…"})  # `PASSWORD=...` in prose


def secret_literals(text: str) -> list[str]:
    found = []
    for m in SECRET_ASSIGNMENT.finditer(text):
        key, value = m.group("key"), m.group("value")
        if key.lower().startswith("secretkeyref") or REFERENCE_KEY.search(key) or _placeholder(value):
            continue
        if re.fullmatch(r"=[\w.!+]+", value):  # a `name==version` pin (tokenizers==0.23.3 in constraints.txt)
            continue
        found.append(m.group(0))
    found += [m.group(0) for m in URL_CREDENTIALS.finditer(text) if not _placeholder(m.group("password"))]
    found += KEY_FORMATS.findall(text)
    return found


@pytest.mark.parametrize("text,leaks", [
    ("password: hunter2", True),
    ("MLFLOW_TRACKING_PASSWORD=s3cr3t drydock sweep x.yaml", True),
    ("--from-literal=password=hunter2", True),
    ("backend: postgresql://mlflow:hunter2@db:5432/mlflow", True),
    ("aws_access_key_id = AKIAABCDEFGHIJKLMNOP", True),
    ("token: 'abc123'", True),
    ("tokenizers==0.23.3", False),
    ("admin_password = changeme", True),
    ("secretKeyRef: {name: drydock-mlflow-db, key: password}", False),
    ("secretKeyRef:\n  name: drydock-mlflow-admin\n  key: password", False),
    ('--from-literal=password="$(openssl rand -base64 24)"', False),
    ("postgresql://mlflow:${PGPASSWORD}@db:5432/mlflow", False),
    ("export MLFLOW_TRACKING_PASSWORD=$(kubectl get secret x -o jsonpath='{.data.password}')", False),
    ("automountServiceAccountToken: false", False),
    ("secretName: drydock-mlflow-admin", False),
    ("MLFLOW_FLASK_SERVER_SECRET_KEY from the secret", False),
    ("password: ${MLFLOW_TRACKING_PASSWORD}", False),
    ("secretsmanager:GetSecretValue on the secret", False),
    ("lines like MLFLOW_TRACKING_PASSWORD=... in the secret", False),
    ("password: the PostgreSQL login", True),  # prose in that shape reads as a value: rephrase it
])
def test_the_secret_detector_itself(text, leaks):
    assert bool(secret_literals(text)) is leaks, secret_literals(text)


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: p.relative_to(CLUSTER).as_posix())
def test_no_credential_literal_anywhere_in_cluster(path):
    leaks = secret_literals(path.read_text(errors="replace"))
    assert not leaks, f"{path.relative_to(ROOT)}: credential-looking literals {leaks}"
