"""The MLflow model registry: Pareto students as versions, and the `champion` alias.

What a consumer gets: `mlflow.pyfunc.load_model("models:/NAME@champion").predict(texts)` returns
a DataFrame of `label`/`score`, with only mlflow and transformers (and torch) installed. So a
student is logged as a transformers text-classification *pipeline*
(`mlflow.transformers.log_model`), not as a torch module: MLflow 3's PyTorch flavor defaults to
torch.export, which fails on a Hugging Face model's output and freezes the sequence length unless
a tensor signature is declared, and a tensor signature would make consumers tokenize themselves
(docs/stack-facts.md, "MLflow's PyTorch flavor"). The pipeline is saved with `truncation` and the
task's `max_length`, so a long text is cut the way training cut it instead of overflowing the
position table.

A custom architecture (CoFi's pruned BERT, whose module ships in the folder via `auto_map`)
never goes through the transformers flavor: MLflow would find the model class through `auto_map`
and load it with `trust_remote_code`, unchecked, in every consumer. It is logged as
`pipeline/measure/student_pyfunc.py`, a self-contained MLflow "model from code" that wraps the
saved folder as an artifact, checks the folder's code against the digests it carries in its
model config before loading it, and does tokenizer → model → softmax itself (same output
columns); `flavor="auto"` also falls back to it when the transformers flavor refuses a stock
student. Before either, the folder's code is checked against its `drydock.json`
(`pipeline.prepare.remote_code`); the trial's run is tagged `drydock.code_sha256` and the
version `code_sha256`. The export's model card (`pipeline.prepare.model_card`, with the latency the
select stage measured) is logged with the model as its `README.md`, whatever the flavor.

When the `champion` alias moves is the policy of `pipeline.select.champion` (pure functions of
the versions' tags); this module reads the tags, asks it, and moves the alias. `drydock
promote` moves the alias by hand. Every version is tagged with the dev set its `metric` was
measured on (`pipeline.select.dev_set`: `eval_task`, `eval_labels`, `eval_data`, `eval_split`,
`eval_examples`); when the champion's differs from this sweep's, both versions are re-scored on
this sweep's dev set through the consumer's loader (`rescore`, given by the select stage) and
each score is kept on its version as `metric_on.<eval_data>`, so a version is scored once per
dev set and every number in the tags says which rows it came from.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import mlflow
from huggingface_hub import ModelCard
from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException

from pipeline.config import SelectionConfig
from pipeline.errors import DrydockError
from pipeline.measure.runtimes import EAGER, pyfunc_module
from pipeline.prepare.model_card import CARD_FILE, read_card
from pipeline.prepare.remote_code import (
    CODE_DIGEST_KEY,
    CODE_FILES_KEY,
    WEIGHTS_FILES_KEY,
    combined_digest,
    recorded_code,
    recorded_weights,
    remote_code,
)
from pipeline.select.champion import (
    CHAMPION,
    ChampionDecision,
    Rescored,
    decide,
    decide_without_candidate,
    incomparable,
    needs_rescore,
    outside_budget,
    tag_number,
)
from pipeline.select.dev_set import DevSet
from pipeline.select.front import exact_ties
from pipeline.tracking import redacted

PYFUNC_MODULE = pyfunc_module(EAGER)  # the student pyfunc: every eager runtime's (`pipeline.measure.runtimes`)
Flavor = Literal["auto", "transformers", "pyfunc"]
SINGLE_EXAMPLE = ["a short example sentence to classify"]
PAIR_EXAMPLE = [{"text": "a first example sentence", "text_pair": "a second example sentence"}]
CODE_RUN_TAG = "drydock.code_sha256"  # the trial run's tag: the digest of the custom code it logged
# what a consumer loading a version runs, and what its latency tags were measured at (issue #22)
RUNTIME_TAG, SHAPE_TAG, DEVICE_TAG = "runtime", "shape", "device"
EAGER_RUNTIME = EAGER  # the transformers / student pyfunc flavors: eager fp32 PyTorch


@contextmanager
def tracking(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API (log_model, register_model) at `uri` for the duration of our
    calls only. `mlflow.set_tracking_uri` also writes MLFLOW_TRACKING_URI (and the registry's
    MLFLOW_REGISTRY_URI) into os.environ, and restoring with `get_tracking_uri()` would pin the
    *default* store explicitly, so later clients built without a URI would silently use
    ./mlflow.db: the module globals and both variables are restored exactly as they were."""
    from mlflow.tracking._model_registry import utils as registry_utils
    from mlflow.tracking._tracking_service import utils as tracking_utils

    keys = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    saved_env = {k: os.environ.get(k) for k in keys}
    saved_tracking, saved_registry = tracking_utils._tracking_uri, registry_utils._registry_uri
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        # restores mlflow's own unset state (None) too: set_tracking_uri is typed str | Path only
        mlflow.set_tracking_uri(saved_tracking)  # type: ignore[arg-type]
        registry_utils._registry_uri = saved_registry
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def client_for(uri: str) -> MlflowClient:
    """Registry and tracking in one store, whatever the process-wide registry setting says."""
    return MlflowClient(uri, registry_uri=uri)


def pip_requirements() -> list[str]:
    """Given explicitly: MLflow's inference of requirements imports the model in a subprocess
    (slow, and it would list drydock, which a consumer must not need)."""
    import torch
    import transformers

    return [f"mlflow=={mlflow.__version__}", f"transformers=={transformers.__version__}",
            f"torch>={torch.__version__.split('+')[0]}", "pandas"]


def text_classifier(folder: Path):
    """The consumer's view of a student folder: a transformers text-classification pipeline."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    trust = remote_code(folder)  # False for a stock BERT; raises for code that is not the recorded code
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), trust_remote_code=trust).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust)  # it reads config.json too
    return pipeline("text-classification", model=model, tokenizer=tokenizer, trust_remote_code=trust)


# ----------------------------------------------------------------------------------------------
# logging and registering one student
# ----------------------------------------------------------------------------------------------


def _log_card(card: ModelCard, model_id: str, run_id: str) -> None:
    """Our model card as `README.md` at the root of the logged model, whatever the flavor (the
    transformers flavor also keeps it as `model_card.md`/`model_card_data.yaml`, the pyfunc's
    student folder as `student/README.md`), and in the trial run's copy of the student folder,
    which the recorder uploaded before the select stage measured the latency the card now gives."""
    client = MlflowClient(mlflow.get_tracking_uri())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / CARD_FILE
            path.write_text(card.content, encoding="utf-8")
            client.log_model_artifact(model_id, str(path))
            if any(f.path == f"student/{CARD_FILE}" for f in client.list_artifacts(run_id, "student")):
                client.log_artifact(run_id, str(path), "student")
    except Exception as e:  # noqa: BLE001 - the model is logged: a missing card must not leave it unregistered
        print(f"warning: registry: the model card could not be uploaded ({type(e).__name__}: {e}); registering without it")


def log_student(
    folder: Path,
    run_id: str,
    *,
    max_length: int | None,
    pair: bool = False,
    flavor: Flavor = "auto",
    log: Callable[[str], None] = print,
    runtime: dict[str, str] | None = None,
) -> tuple[str, str]:
    """Log the student folder as a model of the run; returns (model URI, flavor used).
    Needs `tracking(uri)` around it. `runtime`: the student pyfunc's `dtype` / `device` (a
    half-precision variant), which only the pyfunc flavor carries.

    The flavors log to the active run, so the trial's (ended) run is resumed; ending it again
    would stamp it with today's end time and make the trial look as long as the sweep, so its
    original status and end time are put back (`set_terminated(..., end_time=...)`)."""
    with keeps_ending(run_id):
        return _log_student(folder, run_id, max_length=max_length, pair=pair, flavor="pyfunc" if runtime else flavor, log=log,
                            runtime=runtime)


@contextmanager
def keeps_ending(run_id: str) -> Iterator[None]:
    """Around a `mlflow.start_run(run_id=...)` that resumes an ended trial run to log a model to
    it: its status and end time are put back after (see `log_student`)."""
    client = MlflowClient(mlflow.get_tracking_uri())
    ended = client.get_run(run_id).info
    try:
        yield
    finally:
        if ended.end_time is not None:
            client.set_terminated(run_id, status=ended.status, end_time=ended.end_time)


def _log_student(folder: Path, run_id: str, *, max_length: int | None, pair: bool, flavor: Flavor,
                 log: Callable[[str], None], runtime: dict[str, str] | None = None) -> tuple[str, str]:
    custom = remote_code(folder)  # code that is not the recorded code stops here, before anything imports it
    if custom and flavor == "transformers":
        raise DrydockError(f"{folder}: ships custom model code, which MLflow's transformers flavor would load with "
                           "trust_remote_code unchecked in every consumer; log it with flavor 'pyfunc' or 'auto'")
    code = recorded_code(folder) if custom else None
    example = PAIR_EXAMPLE if pair else SINGLE_EXAMPLE
    # the export's own card: given to the transformers flavor, MLflow writes it instead of fetching
    # one from the hub for the folder's path (which warned, offline or not, for every student)
    card = read_card(folder)
    with mlflow.start_run(run_id=run_id):  # resumes the trial's run; log_student restores its ending
        if code:
            mlflow.set_tag(CODE_RUN_TAG, combined_digest(code))
        if flavor in ("auto", "transformers") and not custom:
            try:
                config = {"truncation": True, "max_length": max_length} if max_length else {"truncation": True}
                # an absolute path: MLflow still asks the hub for a LICENSE of `name_or_path`, which a
                # relative `a/b` would look like a repository id for; an absolute one is refused offline
                info = mlflow.transformers.log_model(
                    text_classifier(Path(folder).absolute()), name="model", task="text-classification",
                    input_example=example, pip_requirements=pip_requirements(), model_config=config, model_card=card,
                )
            except Exception as e:
                if flavor == "transformers":
                    raise
                log(f"registry: the transformers flavor cannot log {folder} ({type(e).__name__}: {e}); "
                    "logging it as a pyfunc model instead")
            else:  # outside the try: a failed card upload must not log the model a second time as a pyfunc
                _log_card(card, info.model_id, run_id)
                return info.model_uri, "transformers"
        model_config: dict[str, Any] = {"max_length": max_length} if max_length else {}
        model_config.update(runtime or {})
        if code:  # what the pyfunc checks the folder against in the consumer's process
            model_config.update({CODE_FILES_KEY: code, CODE_DIGEST_KEY: combined_digest(code)})
        weights = recorded_weights(folder)
        if weights:  # the export's record, checked against the downloaded folder before it loads
            model_config[WEIGHTS_FILES_KEY] = weights
        info = mlflow.pyfunc.log_model(
            name="model", python_model=str(PYFUNC_MODULE), artifacts={"student": str(folder)},
            model_config=model_config, input_example=example, pip_requirements=pip_requirements(),
        )
        _log_card(card, info.model_id, run_id)
        return info.model_uri, "pyfunc"


def ensure_registered_model(client: MlflowClient, name: str, description: str = "", tags: dict[str, str] | None = None) -> None:
    try:
        client.get_registered_model(name)
    except MlflowException:
        try:
            client.create_registered_model(name, tags=tags, description=description)
        except MlflowException:  # created meanwhile
            pass


def register(client: MlflowClient, name: str, model_uri: str, tags: dict[str, str], description: str = "") -> ModelVersion:
    """A new version of `name` (needs `tracking(uri)` around it); MLflow links it to the run
    that logged the model."""
    version = str(mlflow.register_model(model_uri, name, tags=tags).version)
    if description:
        client.update_model_version(name, version, description=description)
    return client.get_model_version(name, version)


def versions(client: MlflowClient, name: str) -> list[ModelVersion]:
    found = client.search_model_versions(f"name = '{name}'")
    return sorted(found, key=lambda v: int(v.version))


def find_version(client: MlflowClient, name: str, student_path: str, runtime: str = EAGER_RUNTIME,
                 same: dict[str, str] | None = None) -> ModelVersion | None:
    """The version already holding this exact export in this runtime (and with these `same` tags:
    an ONNX file's digest): re-running a stage must not duplicate it. A version without a
    `runtime` tag (registered before runtimes existed) is the eager one."""
    for v in versions(client, name):
        if (v.tags.get("student_path") == str(student_path) and v.tags.get(RUNTIME_TAG, EAGER_RUNTIME) == runtime
                and all(v.tags.get(k) == value for k, value in (same or {}).items())):
            return v
    return None


# ----------------------------------------------------------------------------------------------
# the champion alias
# ----------------------------------------------------------------------------------------------


def champion_version(client: MlflowClient, name: str) -> ModelVersion | None:
    try:
        return client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        return None


RESCORE_TAG = "metric_on.{}"  # a version's score on another dev set, keyed by that set's `eval_data`

Rescore = Callable[[str], float]  # version → its primary metric on this sweep's dev set


def update_champion(client: MlflowClient, name: str, version: ModelVersion, budget: SelectionConfig | None = None,
                    dev: DevSet | None = None, rescore: Rescore | None = None) -> ChampionDecision:
    """Offer `version` the alias. With `dev` and `rescore`, a comparable champion whose metric was
    measured on other data is re-scored, with the candidate, on this sweep's dev set first."""
    current = champion_version(client, name)
    candidate = str(version.version)
    rescored = None
    if (current is not None and str(current.version) != candidate and dev is not None and rescore is not None
            and needs_rescore(version.tags, current.tags) and incomparable(version.tags, current.tags) is None
            and outside_budget(current.tags, budget) is None):
        scores = {}
        for role, judged in (("candidate", version), ("champion", current)):
            try:
                scores[role] = score_on(client, name, judged, dev, rescore)
            except Exception as e:  # noqa: BLE001 - a pair that cannot be judged leaves the alias; a person decides
                first = str(e).splitlines()[0] if str(e) else ""
                return ChampionDecision(False, str(current.version), str(current.version),
                                        f"the {role} v{judged.version} could not be scored on this sweep's dev set "
                                        f"({type(e).__name__}: {first}); the champion keeps the alias: check it, or "
                                        "promote by hand")
        rescored = Rescored(candidate=scores["candidate"], champion=scores["champion"], data=dev.describe())
    decision = decide(candidate, version.tags, str(current.version) if current is not None else None,
                      current.tags if current is not None else None, budget, rescored)
    if decision.moved:
        client.set_registered_model_alias(name, CHAMPION, candidate)
    return decision


def score_on(client: MlflowClient, name: str, version: ModelVersion, dev: DevSet, rescore: Rescore) -> float:
    """`version`'s metric on `dev`: the one it recorded for those rows, else scored now and
    recorded (the export does not change, so neither does its score on the same rows)."""
    key = RESCORE_TAG.format(dev.fingerprint)
    recorded = tag_number(version.tags.get(key))
    if not math.isnan(recorded):
        return recorded
    value = float(rescore(str(version.version)))
    client.set_model_version_tag(name, str(version.version), key, repr(value))
    return value


def promote(client: MlflowClient, name: str, version: str) -> str | None:
    """Move the alias by hand (no metric check); returns the previous champion's version."""
    try:
        client.get_model_version(name, str(version))
    except MlflowException:
        known = ", ".join(str(v.version) for v in versions(client, name)) if _exists(client, name) else "none"
        raise DrydockError(f"{name} version {version}: no such version (versions: {known})") from None
    current = champion_version(client, name)
    client.set_registered_model_alias(name, CHAMPION, str(version))
    return str(current.version) if current is not None else None


def _exists(client: MlflowClient, name: str) -> bool:
    try:
        client.get_registered_model(name)
        return True
    except MlflowException:
        return False


def require_model(client: MlflowClient, name: str, uri: str) -> None:
    if not _exists(client, name):
        raise DrydockError(f"registered model {name!r} not found at {redacted(uri)}")


# ----------------------------------------------------------------------------------------------
# the select stage's part: every Pareto member, then the alias
# ----------------------------------------------------------------------------------------------


def tag_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def version_tags(config: dict[str, Any], sweep: str, measurement: Any | None, metadata: dict[str, Any]) -> dict[str, str]:
    """Everything a consumer or a later sweep needs to judge a version without drydock."""
    tags = {
        "sweep": sweep,
        "method": config["method"],
        "config": config["config"],
        "params": config["params"],
        "trial_id": config["best_trial_id"],
        "seed": config["best_seed"],
        "metric_name": config["metric_name"],
        "metric": config["metric_mean"],
        "metric_std": config["metric_std"],
        "metric_n": config["n"],
        "metric_this_seed": config["best_metric"],
        # this export's own timing (what the budget was checked on), not the seed mean: CoFi's
        # seeds prune to different sizes, and the tags must describe the model a consumer loads
        "latency_ms": config["best_latency_ms"],
        "latency_p90_ms": config["best_latency_p90_ms"],
        "speedup": config["best_speedup"],
        "num_params": _count(config["num_params"]),
        "num_params_encoder": _count(config["num_params_encoder"]),
        "teacher": metadata.get("teacher"),
        # the hub commits the teacher and the data were loaded at (drydock.json; absent when not from the hub)
        "teacher_revision": metadata.get("teacher_revision"),
        "teacher_metric": metadata.get("teacher_metric"),
        "data_fingerprint": metadata.get("data_fingerprint"),
        "data_revision": metadata.get("data_revision"),
        # the digest of the custom code the export ships (CoFi's `_pruned_bert.py`; drydock.json)
        "code_sha256": metadata.get("code_sha256"),
        "student_path": config["best_student_path"],
    }
    tags[RUNTIME_TAG] = EAGER_RUNTIME
    if measurement is not None:
        tags.update({
            SHAPE_TAG: f"{measurement.batch_size}x{measurement.seq_length}",
            DEVICE_TAG: measurement.device,
            "latency_device": measurement.description,
            "latency_batch_size": measurement.batch_size,
            "latency_seq_length": measurement.seq_length,
            "latency_threads": measurement.threads,
        })
    return {k: tag_text(v) for k, v in tags.items() if tag_text(v) != ""}


def _count(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(value)


def student_metadata(folder: Path) -> dict[str, Any]:
    path = folder / "drydock.json"
    return json.loads(path.read_text()) if path.is_file() else {}


@dataclass
class RegistryOutcome:
    versions: dict[str, str] = field(default_factory=dict)  # config_key → its eager version
    variants: dict[str, str] = field(default_factory=dict)  # "<trial_id>/<runtime>" → version (variants registered)
    decision: ChampionDecision | None = None


# registers a sweep's variants and returns (the alias's candidate version or None, why): `VariantFront`
VariantsFront = Callable[["Registration", RegistryOutcome], tuple[str | None, str]]


@dataclass
class Registration:
    """What registering any version of one sweep needs (`register_config`, and
    `pipeline.select.variant_registry.register_variant`). Needs `tracking(uri)` around its use."""

    client: MlflowClient
    name: str
    sweep: str
    experiment_id: str
    measurements: dict[str, Any]
    max_length: int | None
    pair: bool
    flavor: Flavor = "auto"
    log: Callable[[str], None] = print
    localize: Callable[[str], Path] = Path
    dev: DevSet | None = None

    def run_of(self, config) -> str:
        return config["best_run_id"] or _orphan_run(self.client, self.experiment_id, self.sweep)

    def tags_of(self, config, folder: Path) -> dict[str, str]:
        tags = version_tags(config.to_dict(), self.sweep, self.measurements.get(config["best_trial_id"]), student_metadata(folder))
        if self.dev is not None:
            tags.update(self.dev.tags())
        return tags


FRONT_TIES = "front_ties"  # how many other configurations of the front the version stands for


def register_config(reg: Registration, config, ties: int = 0) -> str | None:
    """The configuration's served export (its best seed) as an eager version, once; its tags
    refreshed when it is already registered (more seeds may have moved the mean since). None
    when the folder is gone. `ties`: how many other configurations of the front sit at exactly
    its point and are served by this version (`pipeline.select.front.exact_ties`), its tag
    `front_ties`."""
    client, name = reg.client, reg.name
    folder = reg.localize(str(config["best_student_path"]))
    if not (folder / "config.json").is_file():
        reg.log(f"registry: {config['config']}: student folder {config['best_student_path']} is missing; not registered")
        return None
    tags = reg.tags_of(config, folder)
    if ties:
        tags[FRONT_TIES] = str(ties)
    existing = find_version(client, name, str(config["best_student_path"]))
    if existing is not None:
        for key, value in tags.items():
            client.set_model_version_tag(name, existing.version, key, value)
        if not ties and FRONT_TIES in existing.tags:  # tied in an earlier round, alone now
            client.delete_model_version_tag(name, existing.version, FRONT_TIES)
        return str(existing.version)
    model_uri, used = log_student(folder, reg.run_of(config), max_length=reg.max_length, pair=reg.pair, flavor=reg.flavor,
                                  log=reg.log)
    tags["flavor"] = used
    description = (f"{config['config']}: {config['metric_name']} {config['metric_mean']:.4f} over {config['n']} seed(s), "
                   f"this export {config['best_latency_ms']:.2f} ms p50")
    version = register(client, name, model_uri, tags, description)
    reg.log(f"registry: {name} v{version.version} ← {config['config']} ({used} flavor)")
    return str(version.version)


def register_front(
    uri: str,
    name: str,
    front,
    champion,
    *,
    sweep: str,
    experiment_id: str,
    measurements: dict[str, Any],
    max_length: int | None,
    pair: bool,
    flavor: Flavor = "auto",
    budget: SelectionConfig | None = None,
    log: Callable[[str], None] = print,
    localize: Callable[[str], Path] = Path,
    dev: DevSet | None = None,
    rescore: Rescore | None = None,
    variants_front: VariantsFront | None = None,
) -> RegistryOutcome:
    """Register each Pareto configuration's best-seed export (once), tag it, then offer the
    champion configuration's version the alias. `front` and `champion` come from
    `pipeline.select.pareto.select` under `budget` (the sweep's `selection`), against which the current
    champion is checked too; `measurements` maps trial_id → latency Measurement. `localize`: a
    student path of the table (a work location's URI) as a folder of this machine. `dev`: the dev
    set the front's metrics were measured on (recorded in every version's tags); `rescore`
    scores a version of `name` on it, for a champion measured on other data.

    With `variants_front` (`pipeline.select.variant_registry.VariantFront`: the select stage's
    variants.parquet and every configuration of the selection), the registry serves what was
    measured: the front over (configuration, runtime) of the configurations' served exports is
    registered too, each runtime as the consumer runs it, and the alias is offered to that
    front's champion instead. (Given as a callable, not imported: that module builds on this one.)"""
    client = client_for(uri)
    outcome = RegistryOutcome()
    reg = Registration(client, name, sweep, experiment_id, measurements, max_length, pair, flavor, log, localize, dev)
    with tracking(uri):
        ensure_registered_model(client, name, description=f"Compressed students of sweep {sweep} (drydock)")
        for first, tied in exact_ties(front):
            # the tie-break's choice, or the next of its point whose export is still there
            point = [first, *(row for _, row in tied.iterrows())]
            registered, config = None, first
            for config in point:
                if (registered := register_config(reg, config, ties=len(point) - 1)) is not None:
                    break
            if registered is None:
                continue
            for row in point:  # a tied champion is served by this version
                outcome.versions[row["config_key"]] = registered
            if len(tied):
                log(f"registry: {len(tied)} other configuration(s) of the front tie exactly with {config['config']} "
                    f"({config['metric_name']} {config['metric_mean']:.4f}, {config['latency_ms']:.2f} ms): "
                    f"v{registered} serves them all (the champion rule's tie-break); results.parquet lists each")
        candidate: str | None = None
        if variants_front is not None:
            candidate, why = variants_front(reg, outcome)
            log(f"registry: {why}" + ("" if candidate is not None else f"; the {CHAMPION} alias has no candidate"))
        elif champion is not None and champion["config_key"] not in outcome.versions:
            log(f"registry: the champion candidate {champion['config']} has no registered version; "
                f"the {CHAMPION} alias is left alone")
        elif champion is not None:
            candidate = outcome.versions[champion["config_key"]]
        if candidate is not None:
            outcome.decision = update_champion(client, name, client.get_model_version(name, candidate), budget, dev, rescore)
            verb = "moved to" if outcome.decision.moved else "stays on"
            log(f"registry: {CHAMPION} {verb} v{outcome.decision.version} ({outcome.decision.reason})")
        no_candidate = champion is None if variants_front is None else candidate is None
        if no_candidate and (current := champion_version(client, name)) is not None:
            outcome.decision = decide_without_candidate(str(current.version), current.tags, budget)
            if outcome.decision is not None:
                log(f"registry: {CHAMPION} stays on v{outcome.decision.version} ({outcome.decision.reason})")
    return outcome


def _orphan_run(client: MlflowClient, experiment_id: str, sweep: str) -> str:
    """A run to log under when the results table names none (a hand-made or pre-MLflow table)."""
    run = client.create_run(experiment_id, run_name=f"register-{sweep}", tags={"drydock.sweep": sweep})
    client.set_terminated(run.info.run_id)
    return run.info.run_id
