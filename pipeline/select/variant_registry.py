"""The registry serves what was measured (issue #22, item 5): runtime variants as model versions.

With runtime variants built (`pipeline.measure.job`, variants.parquet), the model a
consumer loads must be the one the front and the champion were chosen on: an int8 student chosen
for its ONNX Runtime latency and its int8 accuracy must not be served as eager fp32. So, after
the eager front is registered (`pipeline.select.registry.register_front`):

- the candidates are the variants of the exports the registry serves (each configuration's best
  seed, `best_trial_id`): the variants table's front and champion are marked again on those rows
  only, under the sweep's budget (`variants.variant_front`, `variants.variant_champion`); with
  `selection.latency.all_seeds` the table also holds other seeds, which are never registered;
- each variant on that front is a version: a `torch` one is its configuration's eager version
  (registered by `register_config` when its configuration is off the eager front); an ONNX
  Runtime one is logged as `pipeline/measure/onnx_pyfunc.py`, a model from code that needs only
  onnxruntime, tokenizers, numpy, pandas and mlflow in the consumer's process (no torch, no
  transformers, no drydock), with the `.onnx` file, the student's `tokenizer.json` and its
  `config.json` (label names) as artifacts;
- every version says what it runs and where its figures were measured: the tags `runtime`,
  `shape` (the front's, `<batch>x<length>`) and `device`; an ONNX version's `metric`,
  `latency_ms`, `latency_p90_ms` and `speedup` are its own (the variant's dev-set score and its
  interleaved timing at the front's shape), with `metric_fp32` (the same export's eager score,
  measured the same way) beside them, and its `variant_path`, `size_bytes` and
  `parity_max_abs_diff`;
- the alias is offered to the variants' champion (the most accurate variant on the front within
  the budget; a latency difference inside the intervals never decides), under the same policy as
  any candidate (`pipeline.select.champion`: it must beat the current champion on the same data).

A custom architecture (CoFi's pruned BERT) needs no custom code as ONNX: the graph is the
architecture, so its ONNX versions carry no `code_sha256`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.entities.model_registry import ModelVersion

from pipeline.config import SelectionConfig
from pipeline.errors import DrydockError
from pipeline.measure.engines import file_sha256, onnx_files
from pipeline.measure.job import runner_name
from pipeline.measure.runtimes import RUNTIMES, pyfunc_module
from pipeline.select.front import VARIANTS, exact_ties
from pipeline.select.registry import (
    DEVICE_TAG,
    EAGER_RUNTIME,
    PAIR_EXAMPLE,
    RUNTIME_TAG,
    SHAPE_TAG,
    SINGLE_EXAMPLE,
    Registration,
    RegistryOutcome,
    find_version,
    keeps_ending,
    log_student,
    register,
    register_config,
    tag_text,
)
from pipeline.select.variants import served_front, variant_champion

TOKENIZER_FILE = "tokenizer.json"  # a fast tokenizer's whole definition: what the ONNX pyfunc tokenizes with
DIGEST_TAG = "variant_sha256"  # an ONNX version's file content: a rebuilt, different file is a new version


def onnx_pip_requirements() -> list[str]:
    """What an ONNX version's consumer installs: no torch, no transformers."""
    from importlib.metadata import PackageNotFoundError, version

    runtime = "onnxruntime"
    for dist in ("onnxruntime", "onnxruntime-gpu"):  # the GPU build is its own distribution, same module
        try:
            runtime = f"{dist}=={version(dist)}"
            break
        except PackageNotFoundError:
            continue
    return [f"mlflow=={mlflow.__version__}", runtime, f"tokenizers=={version('tokenizers')}", "numpy", "pandas"]


def log_onnx_variant(onnx_file: Path, folder: Path, run_id: str, runtime: str, *, max_length: int | None,
                     pair: bool = False, batch_size: int | None = None) -> str:
    """Log the ONNX file with the student folder's tokenizer and config as an ONNX pyfunc model of
    the trial's run; returns its model URI. Needs `tracking(uri)` around it. `max_length`: what
    texts are truncated to (without it a long text overruns the position table); `batch_size`:
    rows per session call in the consumer (the pyfunc's default, 32, when None)."""
    artifacts = {"onnx": Path(onnx_file), "tokenizer": Path(folder) / TOKENIZER_FILE, "config": Path(folder) / "config.json"}
    for role, path in artifacts.items():
        if not path.is_file():
            raise DrydockError(f"{path}: missing; an ONNX version ships the {role} file beside the graph"
                               + (" (the student was saved without a fast tokenizer)" if role == "tokenizer" else ""))
    external = onnx_files(Path(onnx_file))[1:]
    if external:  # only the .onnx file travels: the consumer could not load the graph
        raise DrydockError(f"{onnx_file}: keeps its weights in {', '.join(p.name for p in external)} (ONNX external data, "
                           "a model over 2 GB); an ONNX version ships one file")
    model_config: dict[str, Any] = {"onnx_sha256": file_sha256(Path(onnx_file))}  # checked by the consumer's pyfunc on load
    if max_length:
        model_config["max_length"] = max_length
    if batch_size:
        model_config["batch_size"] = batch_size
    with keeps_ending(run_id), mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(
            name=f"model-{runtime}", python_model=str(pyfunc_module(runtime)),
            artifacts={role: str(path) for role, path in artifacts.items()}, model_config=model_config,
            input_example=PAIR_EXAMPLE if pair else SINGLE_EXAMPLE, pip_requirements=onnx_pip_requirements(),
        )
    return info.model_uri


def variant_tags(base: dict[str, str], row: pd.Series, fp32_metric: float | None) -> dict[str, str]:
    """A variant version's tags: its configuration's (`version_tags`), its own figures over them."""
    # not the configuration's seed spread (the metric is this export's), nor, for ONNX, custom
    # code (the graph is the architecture; a half-precision version loads the folder's code)
    dropped = {"latency_device", "latency_threads", "metric_std", "metric_n"}
    if RUNTIMES[str(row["runtime"])].serving != "cast":
        dropped.add("code_sha256")
    tags = {k: v for k, v in base.items() if k not in dropped}
    own = {
        RUNTIME_TAG: row["runtime"], SHAPE_TAG: row["front_shape"], DEVICE_TAG: row["device"],
        "metric": row["metric"], "metric_this_seed": row["metric"], "metric_fp32": fp32_metric,
        "latency_ms": row["latency_ms"], "latency_p90_ms": row["latency_p90_ms"], "latency_low_ms": row["latency_low_ms"],
        "latency_high_ms": row["latency_high_ms"], "speedup": row["speedup"],
        "speedup_same_runtime": row["speedup_same_runtime"], "latency_threads": row["threads"],
        "size_bytes": row["size_bytes"], "parity_max_abs_diff": row["parity_max_abs_diff"], "variant_path": row["path"],
    }
    batch, _, length = str(row["front_shape"]).partition("x")
    own.update({"latency_batch_size": batch, "latency_seq_length": length})
    tags.update({k: tag_text(None if pd.isna(v) else v) for k, v in own.items()})
    return {k: v for k, v in tags.items() if v != ""}


def register_variant(reg: Registration, config: pd.Series, row: pd.Series, variants: pd.DataFrame,
                     outcome: RegistryOutcome) -> str | None:
    """One variant of a served export as a version (once): the eager one for `torch`, the student
    pyfunc cast to the variant's dtype for `torch-fp16` / `torch-bf16`, an ONNX pyfunc model for
    ONNX Runtime. None when it cannot be (said in the log; the others go on)."""
    runtime = str(row["runtime"])
    serving = RUNTIMES[runtime].serving  # how this runtime is logged for a consumer (`pipeline.measure.runtimes`)
    if serving == "eager":
        eager = outcome.versions.get(config["config_key"]) or register_config(reg, config)
        if eager is not None:  # the eager version says which shape and device the variants were timed at too
            outcome.versions[config["config_key"]] = eager
            reg.client.set_model_version_tag(reg.name, eager, SHAPE_TAG, str(row["front_shape"]))
            reg.client.set_model_version_tag(reg.name, eager, DEVICE_TAG, str(row["device"]))
        return eager
    folder = reg.localize(str(config["best_student_path"]))
    same = variants[(variants["trial_id"] == row["trial_id"]) & (variants["runtime"] == EAGER_RUNTIME)]["metric"].dropna()
    try:
        tags = variant_tags(reg.tags_of(config, folder), row, float(same.iloc[0]) if len(same) else None)
        onnx_file = reg.localize(str(row["path"])) if serving == "onnx" else None
        if onnx_file is not None and onnx_file.is_file():
            tags[DIGEST_TAG] = file_sha256(onnx_file)  # one version per file content, whichever run built it
        existing = find_version(reg.client, reg.name, str(config["best_student_path"]), runtime,
                                {DIGEST_TAG: tags[DIGEST_TAG]} if DIGEST_TAG in tags else None)
        if existing is not None:
            for key, value in tags.items():
                reg.client.set_model_version_tag(reg.name, existing.version, key, value)
            return str(existing.version)
        if onnx_file is None:
            dtype = str(RUNTIMES[runtime].dtype)
            cast = {"dtype": dtype, "device": str(row["device"])}
            model_uri, used = log_student(folder, reg.run_of(config), max_length=reg.max_length, pair=reg.pair,
                                          log=reg.log, runtime=cast)
            tags["flavor"] = f"{used} ({dtype})"
        else:
            model_uri = log_onnx_variant(onnx_file, folder, reg.run_of(config), runtime, max_length=reg.max_length,
                                         pair=reg.pair)
            tags["flavor"] = "onnx-pyfunc"
    except Exception as e:  # noqa: BLE001 - one variant that cannot be logged must not stop the others or the eager ones
        reg.log(f"registry: {config['config']} in {runtime} not registered ({type(e).__name__}: {e})")
        return None
    description = (f"{config['config']} in {runtime}: {row['metric_name']} {row['metric']:.4f} on the dev set, "
                   f"{row['latency_ms']:.2f} ms p50 at {row['front_shape']} ({row['device']}, {row['threads']} threads)")
    version: ModelVersion = register(reg.client, reg.name, model_uri, tags, description)
    reg.log(f"registry: {reg.name} v{version.version} ← {config['config']} in {runtime} ({tags['flavor']})")
    return str(version.version)


@dataclass(frozen=True)
class VariantFront:
    """What `registry.register_front` calls to register the variants (`variants_front=`): the
    select stage's variants table, every configuration of its selection, the sweep's budget."""

    variants: pd.DataFrame
    configs: pd.DataFrame
    budget: SelectionConfig | None = None

    def __call__(self, reg: Registration, outcome: RegistryOutcome) -> tuple[str | None, str]:
        return register_variant_front(reg, self.variants, self.configs, self.budget, outcome)


def register_variant_front(reg: Registration, variants: pd.DataFrame, configs: pd.DataFrame, budget: SelectionConfig | None,
                           outcome: RegistryOutcome) -> tuple[str | None, str]:
    """Register the front over (served export, runtime); returns the version of its champion
    (`variant_champion`), the alias's candidate, and what was decided: None with the reason when
    no variant qualifies or the champion's could not be registered."""
    marked = served_front(variants, configs, budget)
    by_trial = {str(c["best_trial_id"]): c for _, c in configs.iterrows()}
    # variants at exactly one point (students of one architecture whose scores tie, each runtime
    # timed once per architecture) are one version, as tied configurations are (`register_front`)
    for first, tied in exact_ties(marked[marked["pareto"].fillna(False).astype(bool)], VARIANTS):
        point = [first, *(row for _, row in tied.iterrows())]
        version = None
        for row in point:  # the tie-break's choice, or the next whose export is still there
            if (version := register_variant(reg, by_trial[str(row["trial_id"])], row, variants, outcome)) is not None:
                break
        if version is None:
            continue
        for row in point:
            outcome.variants[runner_name(str(row["trial_id"]), str(row["runtime"]))] = version
        if len(point) > 1:
            reg.log(f"registry: {len(point) - 1} other variant(s) of the front tie exactly with "
                    f"{runner_name(str(first['trial_id']), str(first['runtime']))}: v{version} serves them all")
    champion = variant_champion(marked, budget)
    if champion is None:
        return None, "no runtime variant of a served export is within the budget"
    key = runner_name(str(champion["trial_id"]), str(champion["runtime"]))
    if key not in outcome.variants:
        return None, f"the variants' champion {key} could not be registered (above)"
    return outcome.variants[key], f"the variants' champion is {key} (the most accurate on the front over runtimes)"
