"""An MLflow "model from code": a saved student folder as a text-in, labels-out pyfunc model.

This is how the registry logs a student with custom code, and its fallback when
`mlflow.transformers.log_model` cannot log a stock one (see pipeline/select/registry.py). MLflow copies this file into the logged model and runs it on the
consumer's machine, where drydock is not installed, so it imports only mlflow, pandas, torch and
transformers — never `pipeline` or `methods`. The student folder travels as the artifact
`student`; a custom architecture (CoFi's pruned BERT) ships its own module inside that folder and
loads with `trust_remote_code=True` — only after `check_code` has found every `.py` file of the
folder to be the one recorded when the model was logged (`code_files` in the model config, the
digests of the export's `drydock.json`). A changed, added or missing file is refused before
transformers imports anything, and so are weights other than the recorded ones (`weights_files`,
`check_weights`); a stock architecture loads with `trust_remote_code=False`. A
consumer can hold the model to the registry version's `code_sha256` tag by passing it:
`mlflow.pyfunc.load_model(uri, model_config={"code_sha256": tag})` (`drydock eval` does).

Half precision (the `torch-fp16` / `torch-bf16` runtime variants the registry serves): the model
config's `dtype` ("float16" or "bfloat16") casts the model as the select stage timed it, and
`device` ("cuda", "cuda:1", ...) puts it there; a cuda device on a machine without one falls back to
the CPU with a warning, so the model still answers. Without them: fp32 on the CPU, as before.

Input: a list of texts, a list of `{"text": ..., "text_pair": ...}` dicts (pair tasks), or a
DataFrame with a `text` (and `text_pair`) column or a single unnamed text column.
Output: a DataFrame with `label` and `score`, as the transformers flavor returns: the label name
from the model's `id2label` and its softmax probability; for a regression model (STS-B) the
raw predicted value as `score`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel  # `mlflow.pyfunc` is a LazyLoader to a type checker


class CodeMismatch(RuntimeError):
    """The student folder's code is not the code recorded with this model: it must not run."""


class WeightsMismatch(RuntimeError):
    """The student folder's weights are not the ones recorded with this model: a swapped or
    copied-in `model.safetensors` would answer with another model's numbers."""


def _file_digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*.py"))}


def _named_code(folder: Path) -> list[str]:
    """The code files config.json / tokenizer_config.json name (`auto_map`, `custom_pipelines`)."""
    def refs(value) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)):
            return [r for v in value for r in refs(v)]
        if isinstance(value, dict):
            return [r for v in value.values() for r in refs(v)]
        return []

    names = set()
    for config_name in ("config.json", "tokenizer_config.json"):
        path = folder / config_name
        if path.is_file():
            config = json.loads(path.read_text())
            found = refs(config.get("auto_map"))
            found += refs([p.get("impl") for p in (config.get("custom_pipelines") or {}).values() if isinstance(p, dict)])
            for ref in found:
                if "--" in ref:
                    raise CodeMismatch(f"{path}: names code from another repository ({ref}), which nothing records")
                names.add(ref.rsplit(".", 1)[0].replace(".", "/") + ".py")
    return sorted(names)


def _combined_digest(digests: dict[str, str]) -> str:
    """The SHA-256 of the sorted `<digest>  <file>` lines: the registry's `code_sha256` tag."""
    return hashlib.sha256("".join(f"{d}  {n}\n" for n, d in sorted(digests.items())).encode()).hexdigest()


def check_code(folder: str | Path, recorded: dict[str, str] | None, expected: str | None = None) -> bool:
    """`trust_remote_code` for the student folder: False when its config names no custom code
    (a stock BERT); True when it does and every `.py` file is the one recorded at registration
    (`code_files` in this model's config, whose combined digest must be `expected` when given:
    the registry version's `code_sha256` tag); otherwise `CodeMismatch`, before anything is
    imported. drydock's own loaders check the same way (`pipeline/prepare/remote_code.py`)."""
    folder = Path(folder)
    named = _named_code(folder)
    if not named:
        return False
    if not recorded:
        raise CodeMismatch(f"{folder}: the student ships custom code ({', '.join(named)}) but this model records no digest of it")
    if expected and _combined_digest(recorded) != expected:
        raise CodeMismatch(f"{folder}: the code recorded with this model has SHA-256 {_combined_digest(recorded)}, "
                           f"but {expected} was expected (the registry's code_sha256 tag); refusing to load it")
    actual = _file_digests(folder)
    for name in sorted(set(actual) | set(recorded) | set(named)):
        if actual.get(name) != recorded.get(name):
            raise CodeMismatch(f"{folder / name}: SHA-256 {actual.get(name, '(missing)')}, but {recorded.get(name, '(not recorded)')} "
                               "was recorded when the model was registered; refusing to load code that is not the registered code")
    return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:  # in blocks: a teacher-sized file need not sit in memory twice
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_weights(folder: str | Path, recorded: dict[str, str] | None) -> None:
    """Every `.safetensors` file of the folder is one recorded when the model was logged
    (`weights_files` in this model's config: the export's `drydock.json` record), and none is
    missing; otherwise `WeightsMismatch`, before transformers reads any. drydock's own loaders
    check the same way (`pipeline/prepare/remote_code.py`, `check_weights`). A model logged before
    weights were recorded (`recorded` None) is not checked."""
    if not recorded:
        return
    folder = Path(folder)
    actual = {p.relative_to(folder).as_posix(): _sha256(p) for p in sorted(folder.rglob("*.safetensors"))}
    for name in sorted(set(actual) | set(recorded)):
        if actual.get(name) != recorded.get(name):
            raise WeightsMismatch(f"{folder / name}: SHA-256 {actual.get(name, '(missing)')}, but {recorded.get(name, '(not recorded)')} "
                                  "was recorded when the model was registered; refusing to load weights that are not the registered ones")


def _rows(model_input) -> list[tuple[str, str | None]]:
    if isinstance(model_input, pd.DataFrame):
        if "text" in model_input.columns:
            pairs = model_input["text_pair"] if "text_pair" in model_input.columns else [None] * len(model_input)
            return [(str(a), None if pd.isna(b) else str(b)) for a, b in zip(model_input["text"], pairs)]
        return [(str(a), None) for a in model_input.iloc[:, 0]]
    if isinstance(model_input, (str, dict)):
        model_input = [model_input]
    rows = []
    for item in model_input:
        if isinstance(item, dict):
            rows.append((str(item["text"]), item.get("text_pair")))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            rows.append((str(item[0]), str(item[1])))
        else:
            rows.append((str(item), None))
    return rows


class StudentTextClassifier(PythonModel):
    def load_context(self, context) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = context.artifacts["student"]
        config = context.model_config or {}
        trust = check_code(folder, config.get("code_files"), config.get("code_sha256"))  # before anything imports it
        check_weights(folder, config.get("weights_files"))
        import torch

        dtype = getattr(torch, str(config["dtype"])) if config.get("dtype") else None
        self.device = str(config.get("device") or "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            import warnings

            warnings.warn(f"this model was timed on {self.device}, which this machine does not have: it runs on the CPU", stacklevel=2)
            self.device = "cpu"
        # loaded in the dtype, then every float cast, as the variants step loaded what it measured
        # (`runtimes.load_model`): the peak memory and parity it recorded are this model's
        kwargs = {"dtype": dtype} if dtype is not None else {}
        model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=trust, **kwargs).eval()
        self.model = (model.to(dtype) if dtype is not None else model).to(self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust)  # it reads config.json too
        self.max_length = config.get("max_length")
        self.batch_size = int(config.get("batch_size", 32))

    def predict(self, context, model_input, params=None) -> pd.DataFrame:
        import torch

        rows = _rows(model_input)
        config = self.model.config
        labels, scores = [], []
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            firsts = [a for a, _ in chunk]
            seconds = [b for _, b in chunk]
            pairs = seconds if all(b is not None for b in seconds) else None
            encoded = self.tokenizer(firsts, pairs, padding=True, truncation=self.max_length is not None,
                                     max_length=self.max_length, return_tensors="pt")
            with torch.inference_mode():
                logits = self.model(**encoded.to(self.device)).logits.float().cpu()
            if getattr(config, "problem_type", None) == "regression":
                labels += [config.id2label.get(0, "LABEL_0")] * len(chunk)
                scores += logits[:, 0].tolist()
                continue
            probs = torch.sigmoid(logits) if logits.shape[-1] == 1 else logits.softmax(-1)
            best = probs.argmax(-1)
            labels += [config.id2label.get(int(i), f"LABEL_{int(i)}") for i in best]
            scores += probs.gather(-1, best[:, None])[:, 0].tolist()
        return pd.DataFrame({"label": labels, "score": scores})


mlflow.models.set_model(StudentTextClassifier())
