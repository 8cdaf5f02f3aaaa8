"""The model card (`README.md`) of an exported model folder, in the Hugging Face format.

A folder leaves drydock for places where drydock is not installed (a hub repository, an MLflow
registry, a colleague's disk), so it has to say itself what it is: how it was made (method,
teacher and its hub commit, data and its fingerprint), how good it is and on what (dev metrics
only), how big it is, how fast it was measured to be and where, how to load it (and, for custom
code, what runs and how to check it), and what it was never tested on.

Everything on the card is read from the folder (`drydock.json`, `config.json`, the weight files),
so the card can be rendered again from the folder alone: the export writes it without latency
(`pipeline.training.export.save_student`), and the select stage, which times the exports later,
rewrites it with the measurement (`write_card(folder, measurement, speedup=...)`). It lives here,
in prepare, beside `remote_code`, because both the trial's export (training) and the registry
(select) use it, and neither stage may import the other (docs/layout.md).

`README.md` is not code: the code digests (`remote_code.file_digests`) cover `*.py` files only,
so rewriting the card never invalidates a CoFi export's recorded code.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any, Protocol

from huggingface_hub import EvalResult, ModelCard, ModelCardData, metadata_load

from pipeline.prepare.models import is_hub_model, resolve_model_ref
from pipeline.prepare.remote_code import CODE_DIGEST_KEY, CODE_FILES_KEY, METADATA_FILE, named_code
from pipeline.workdir import atomic_write

CARD_FILE = "README.md"
FOLDER = "path/to/this/folder"  # how the loading snippets name the folder: it moves after export
NOT_MEASURED = "not measured"
TAGS = ("drydock", "text-classification")
INTRO_STUDENT = "A compressed BERT-family text classifier, made by drydock from a fine-tuned teacher."
INTRO_TEACHER = "A BERT-family text classifier: the teacher drydock fine-tuned for a sweep's students to learn from."
TEACHER_SUMMARY = "the pretrained teacher fine-tuned on the task's labels, which a sweep's students learn from"


class LatencyFigures(Protocol):
    """What the card shows of a latency measurement: `pipeline.measure.latency.Measurement` fits
    (structurally; prepare may not import select)."""

    @property
    def p50_ms(self) -> float: ...
    @property
    def p90_ms(self) -> float: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def seq_length(self) -> int: ...
    @property
    def runs(self) -> int: ...
    @property
    def description(self) -> str: ...


def read_metadata(folder: Path) -> dict[str, Any]:
    path = Path(folder) / METADATA_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def weight_files(folder: Path) -> list[Path]:
    return sorted([*Path(folder).glob("*.safetensors"), *Path(folder).glob("*.bin")])


def parameter_count(folder: Path) -> int | None:
    """The parameters of a saved model: its drydock.json's count, else its safetensors headers'
    (`stored_parameters`); None when neither says."""
    meta = read_metadata(folder)
    return int(meta["num_params"]) if meta.get("num_params") is not None else stored_parameters(folder)


def stored_parameters(folder: Path) -> int | None:
    """Elements in the folder's safetensors files, from their headers (nothing is loaded): the
    count for a folder whose drydock.json has none. None when weights are not all safetensors."""
    files = weight_files(folder)
    if not files or any(f.suffix != ".safetensors" for f in files):
        return None
    total = 0
    for path in files:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= dim
                total += count
    return total


def folder_bytes(folder: Path) -> int:
    """The folder's size without its card, so that rewriting the card does not change it."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and p.name != CARD_FILE)


def teacher_license(teacher: str | None, revision: str | None = None) -> dict[str, str]:
    """The license fields of the teacher's own card, when it can be read without the network (a
    local or `pkg:` folder, or a hub teacher whose README.md is in the local hub cache): a student
    derived from a teacher is bound by its terms. {} when unknown."""
    if not teacher or teacher == "random":
        return {}
    try:
        if is_hub_model(teacher):
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(teacher, CARD_FILE, revision=revision)
            readme = Path(cached) if isinstance(cached, str) else None
        else:
            readme = Path(resolve_model_ref(teacher)) / CARD_FILE
        meta = metadata_load(readme) if readme is not None and readme.is_file() else None
    except Exception:  # an unreadable teacher card is an unknown license, never a failed export
        return {}
    card = meta or {}
    fields = {k: card[k] for k in ("license", "license_name", "license_link") if isinstance(card.get(k), str)}
    return fields if "license" in fields else {}


def _labels(config: dict[str, Any]) -> str:
    if config.get("problem_type") == "regression":
        return "one regression score"
    id2label = config.get("id2label") or {}
    return ", ".join(f"`{id2label[k]}`" for k in sorted(id2label, key=int)) or "unknown"


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def latency_line(latency: LatencyFigures | None, speedup: float | None = None) -> str:
    """The card's latency, always with the device and input shape it was measured on: a latency
    without them means nothing."""
    if latency is None:
        return (f"{NOT_MEASURED} (drydock's select stage times the exports it compares and then rewrites "
                "this card with the figure, the device and the input shape)")
    known = speedup is not None and math.isfinite(speedup)  # the results table's empty cell is NaN
    faster = f", {speedup:.2f}× the teacher's speed on the same machine" if known else ""
    return (f"p50 {latency.p50_ms:.2f} ms, p90 {latency.p90_ms:.2f} ms per batch of {latency.batch_size} × "
            f"{latency.seq_length} tokens (random ids, full attention mask) on {latency.description}, "
            f"{latency.runs} timed runs after warm-up{faster}")


def card_data(meta: dict[str, Any], custom: bool, license_fields: dict[str, str]) -> ModelCardData:
    """The YAML front matter: what the hub and MLflow (`model_card_data.yaml`) read."""
    method, task = meta.get("method", "unknown"), meta.get("task", "unknown")
    tags = [*TAGS, f"drydock-{method}"]
    if meta.get("uses_teacher"):
        tags.append("knowledge-distillation")
    if custom:
        tags.append("custom_code")  # the hub's tag for a folder that needs trust_remote_code
    metric_name, metric = meta.get("metric_name"), meta.get("metric")
    results = []
    if metric_name and isinstance(metric, (int, float)) and not isinstance(metric, bool) and math.isfinite(metric):
        # dataset_type is the hub's id of the dataset where there is one (`nyu-mll/glue`, config `sst2`),
        # which the hub links to its page; else the task's name
        results.append(EvalResult(task_type="text-classification", dataset_type=meta.get("dataset") or task,
                                  dataset_config=meta.get("dataset_config"), dataset_name=f"{task} (dev split)",
                                  dataset_split="dev", metric_type=metric_name, metric_value=metric))
    teacher = meta.get("teacher")
    hub_teacher = bool(teacher and teacher != "random" and _is_hub(teacher))
    return ModelCardData(
        library_name="transformers", pipeline_tag="text-classification", tags=tags,
        license=license_fields.get("license", "unknown"), license_name=license_fields.get("license_name"),
        license_link=license_fields.get("license_link"), base_model=teacher if hub_teacher else None,
        metrics=[metric_name] if metric_name else None, model_name=f"{task}-{method}-student" if results else None,
        eval_results=results or None,
    )


def _is_hub(teacher: str) -> bool:
    try:
        return is_hub_model(teacher)
    except Exception:  # a folder of another machine: not a hub id either
        return False


def _summary(meta: dict[str, Any], config: dict[str, Any], folder: Path, latency_text: str) -> str:
    method = meta.get("method", "unknown")
    summary = f" — {meta['method_summary']}" if meta.get("method_summary") else ""
    params = json.dumps(meta.get("params") or {}, sort_keys=True)
    teacher = meta.get("teacher") or "none recorded"
    revision = f" at hub commit `{meta['teacher_revision']}`" if meta.get("teacher_revision") else ""
    teacher_metric = (f"; its dev {meta.get('metric_name', 'metric')}: {_number(meta['teacher_metric'])}"
                      if meta.get("teacher_metric") is not None else "")
    data_revision = f", hub dataset commit `{meta['data_revision']}`" if meta.get("data_revision") else ""
    num_params = parameter_count(folder)
    encoder = (f" ({meta['num_params_encoder']:,} outside the embeddings)"
               if meta.get("num_params_encoder") is not None else "")
    weights = weight_files(folder)
    return "\n".join([
        "| | |", "|---|---|",
        f"| method | `{method}`{summary}; parameters `{params}`; seed {meta.get('seed', 'unknown')} |",
        f"| teacher | `{teacher}`{revision}{teacher_metric} |",
        f"| data | task `{meta.get('task', 'unknown')}`, data fingerprint `{meta.get('data_fingerprint', 'unknown')}`{data_revision} |",
        f"| labels | {_labels(config)} |",
        f"| parameters | {num_params:,}{encoder} |" if num_params is not None else "| parameters | unknown |",
        f"| size | weights {_size(sum(p.stat().st_size for p in weights))} ({', '.join(p.name for p in weights)}); "
        f"whole folder {_size(folder_bytes(folder))} |",
        f"| latency | {latency_text} |",
    ])


def _metrics(meta: dict[str, Any]) -> str:
    metrics = {k: v for k, v in (meta.get("metrics") or {}).items() if "/" not in k}
    if not metrics and meta.get("metric") is not None:
        metrics = {meta.get("metric_name", "metric"): meta["metric"]}
    if not metrics and meta.get("role") == "teacher":
        return "The teacher stage keeps the teacher's dev metrics in `teacher_metrics.json`, beside this card."
    if not metrics:
        return "No dev metrics were recorded with this export."
    rows = "\n".join(f"| {name} | {_number(value)} |" for name, value in sorted(metrics.items()))
    return f"On the task's dev split, at the best evaluation of training (seed {meta.get('seed', 'unknown')}):\n\n| metric | value |\n|---|---|\n{rows}"


def _loading_stock(config: dict[str, Any]) -> str:
    positions = config.get("max_position_embeddings")
    limit = f" (the model has {positions} positions)" if positions else ""
    return f"""A standard BERT architecture: plain `transformers` loads it, and no code from this folder runs.

```python
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

classifier = pipeline("text-classification", model="{FOLDER}")
classifier(["a short example sentence"], truncation=True)  # [{{'label': ..., 'score': ...}}]

tokenizer = AutoTokenizer.from_pretrained("{FOLDER}")
model = AutoModelForSequenceClassification.from_pretrained("{FOLDER}")
```

Pass `truncation=True`: a text longer than the model's position table{limit} fails otherwise."""


def _loading_custom(folder: Path, meta: dict[str, Any], config: dict[str, Any]) -> str:
    files = sorted((meta.get(CODE_FILES_KEY) or {}).items())
    names = " ".join(name for name, _ in files)
    auto_map = ", ".join(f"`{k}` → `{v}`" for k, v in sorted((config.get("auto_map") or {}).items()))
    digests = "\n".join(f"- `{name}`: `{digest}`" for name, digest in files)
    return f"""A custom (pruned) architecture: the folder ships its own model code, named by the `auto_map` of
`config.json` ({auto_map}). Loading it with `trust_remote_code=True` **imports and runs**
{', '.join(f'`{n}`' for n in named_code(folder))} in your process, so check the code before you trust it.
The export recorded its digests in `drydock.json` (`{CODE_FILES_KEY}`, and `{CODE_DIGEST_KEY}` over them all):

{digests}
- `{CODE_DIGEST_KEY}`: `{meta.get(CODE_DIGEST_KEY, 'not recorded')}`

```bash
cd {FOLDER}
sha256sum {names}              # each digest must equal drydock.json's {CODE_FILES_KEY}
sha256sum {names} | sha256sum  # must equal drydock.json's {CODE_DIGEST_KEY}
find . -name "*.py"            # no other .py file may be present
```

This card and `drydock.json` lie beside the code, so whoever can rewrite the code can rewrite them
too: the registry version's `{CODE_DIGEST_KEY}` tag is the reference to trust. Then:

```python
from transformers import AutoModelForSequenceClassification, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{FOLDER}", trust_remote_code=True)  # it reads config.json's auto_map too
model = AutoModelForSequenceClassification.from_pretrained("{FOLDER}", trust_remote_code=True)
```

Registered in MLflow, it is a pyfunc model that makes this check itself before anything is imported:
`mlflow.pyfunc.load_model("models:/<registered model>@champion").predict(["a short example sentence"])`."""


def _limitations(meta: dict[str, Any], latency: LatencyFigures | None) -> str:
    task = meta.get("task", "the task")
    timed = (f"- Latency was measured only on {latency.description}, with batches of {latency.batch_size} × "
             f"{latency.seq_length} tokens: other devices, batch sizes, sequence lengths, dtypes and runtimes "
             "(ONNX, quantization, another torch) were not timed."
             if latency is not None else "- Latency has not been measured for this card.")
    seed = (f"- The figures are this export's: one seed ({meta['seed']}); a registry version's tags give the "
            "mean and spread over seeds." if meta.get("seed") is not None else "")
    return "\n".join(line for line in [
        f"- Evaluated only on the dev split of `{task}`: no held-out test set, no other domain or "
        "language, and no study of robustness, calibration or fairness.",
        "- The dev split also chose the checkpoint (the best evaluation) and, in a sweep, the "
        "hyperparameters and the registered seed, so the figures above are optimistic.",
        seed,
        timed,
        "- It inherits the teacher's biases and limitations, and its license terms.",
    ] if line)


def render_card(folder: Path, latency: LatencyFigures | None = None, *, speedup: float | None = None) -> ModelCard:
    """The card of the export in `folder`, from the folder alone and the latency given (none:
    "not measured")."""
    folder = Path(folder)
    meta = read_metadata(folder)
    teacher_stage = meta.get("role") == "teacher"  # the teacher stage saves its fine-tuned teacher the same way
    if teacher_stage:
        meta = {"method": "teacher", "method_summary": TEACHER_SUMMARY, **meta}
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    custom = bool(named_code(folder))
    license_fields = teacher_license(meta.get("teacher"), meta.get("teacher_revision"))
    licence = (f"`{license_fields['license']}`, the teacher's" if license_fields else
               "unknown: drydock could not read the teacher's license; this model is bound by the teacher's terms")
    what = "the fine-tuned teacher" if teacher_stage else f"a `{meta.get('method', 'unknown')}` student"
    title = f"{meta.get('task', 'unknown task')}: {what}"
    loading = _loading_custom(folder, meta, config) if custom else _loading_stock(config)
    body = f"""# {title}

{INTRO_TEACHER if teacher_stage else INTRO_STUDENT}
License: {licence}.

{_summary(meta, config, folder, latency_line(latency, speedup))}

## Dev metrics

{_metrics(meta)}

## How to load it

{loading}

## What it was not tested on

{_limitations(meta, latency)}

## Provenance

`drydock.json` in this folder holds the method's parameters, every recorded metric, the teacher,
the data fingerprint and, for hub sources, the commits they were loaded at.
"""
    return ModelCard(f"---\n{card_data(meta, custom, license_fields).to_yaml()}\n---\n\n{body}")


def write_card(folder: Path, latency: LatencyFigures | None = None, *, speedup: float | None = None) -> Path:
    """(Re)write `folder/README.md`; in one step, so a reader (the registry, a copy to a bucket)
    never sees half a card."""
    folder = Path(folder)
    card = render_card(folder, latency, speedup=speedup)
    return atomic_write(folder / CARD_FILE, card.content)


def read_card(folder: Path) -> ModelCard:
    """The folder's card as it is (with the latency the select stage wrote), or rendered now for
    an export made before cards existed; never fetched from the hub."""
    path = Path(folder) / CARD_FILE
    return ModelCard(path.read_text(encoding="utf-8")) if path.is_file() else render_card(Path(folder))
