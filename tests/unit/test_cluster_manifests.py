"""cluster/: every manifest, spec and DeepSpeed preset is checked here, without a cluster.

What a platform engineer applies must at least parse, carry the fields its kind requires, run
commands the CLI accepts on files that exist, agree with itself across files (images, Ray
version, service names, the shared mount), and hold no credential: those come from Kubernetes
secrets or the environment only. No network, no Ray; DeepSpeed is imported only to validate
the presets' schema.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
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
ALL_YAML = sorted(CLUSTER.rglob("*.yaml")) + sorted(CLUSTER.rglob("*.yml"))
TEXT_FILES = sorted(p for p in CLUSTER.rglob("*") if p.is_file() and "__pycache__" not in p.parts)

NAMESPACE = "drydock"
SHARED_MOUNT = "/mnt/drydock"  # the ReadWriteMany work directory on every Ray node
IMAGE_HOME = "/opt/drydock"  # where cluster/Dockerfile keeps the repository (DRYDOCK_HOME)
RAY_IMAGE = re.compile(r"rayproject/ray:(\d+\.\d+\.\d+)-")

API_VERSIONS = {
    "Namespace": "v1", "ServiceAccount": "v1", "PersistentVolumeClaim": "v1", "ConfigMap": "v1",
    "Service": "v1", "Deployment": "apps/v1", "CronJob": "batch/v1",
    "RayCluster": "ray.io/v1", "RayJob": "ray.io/v1",
}
NO_SPEC_KINDS = {"Namespace", "ServiceAccount", "ConfigMap"}


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


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
    for part in ("pyproject.toml", "pipeline", "methods", "cluster"):
        assert re.search(rf"^COPY .*\b{part}\b", dockerfile, re.MULTILINE), f"the image lacks {part}"


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
    for path in MANIFESTS:
        for name in PLACEHOLDER.findall(path.read_text()):
            ours = re.fullmatch(r"DRYDOCK_[A-Z0-9_]+", name)
            assert ours, f"{path.name}: ${{{name}}} (render.sh fills DRYDOCK_* only)"
            assert name in readme, f"{path.name}: ${{{name}}} is not explained in cluster/README.md"


@pytest.mark.skipif(shutil.which("envsubst") is None, reason="envsubst (GNU gettext) is not installed")
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
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
