"""An MLflow "model from code": an ONNX variant of a student as a text-in, labels-out pyfunc model.

Why: the consumer of an ONNX variant (`pipeline/measure/engines.py`: `onnxruntime`, fp32, or
`onnxruntime-int8`) serves it *because* it does not want PyTorch: a CPU build of torch with
transformers is over a gigabyte, ONNX Runtime and `tokenizers` a few tens of megabytes. So this
file, which MLflow copies into the logged model and runs on the consumer's machine (where drydock
is not installed), imports only mlflow, numpy, pandas, onnxruntime and tokenizers: never torch,
transformers, `pipeline` or `methods`. It does what a transformers text-classification pipeline
does with the student folder — tokenize, run, softmax — with the `tokenizers` library (the Rust
tokenizer transformers' fast tokenizers wrap) and an ONNX Runtime session.

Artifacts (`mlflow.pyfunc.log_model(python_model=<this file>, artifacts=...)`):
- `onnx`: the `.onnx` file (`Variant.path`; a graph with external data is not supported: its
  data files would not travel with it). Graph inputs `input_ids`, `attention_mask` and, when the
  model takes them, `token_type_ids`, int64 [batch, sequence]; output `logits` [batch, labels].
- `tokenizer`: the student folder's `tokenizer.json`.
- `config`: the student folder's `config.json`: `id2label`, `problem_type` and `pad_token_id`.

Model config (`model_config=`, or at load time `mlflow.pyfunc.load_model(uri, model_config=...)`):
- `max_length`: truncate every row to it (pairs `longest_first`), as training did; absent: no
  truncation, as the student's own pyfunc (`student_pyfunc.py`) does.
- `batch_size`: rows per session run (default 32); each batch is padded to its longest row.
- `threads`: ONNX Runtime's intra-op thread count (default: ORT's own choice, one per core).
- `providers`: ONNX Runtime execution providers (default `["CPUExecutionProvider"]`).
- `onnx_sha256`: the graph's SHA-256 when the version was logged (`log_onnx_variant` records it):
  a graph that differs (swapped in the artifact store, copied from another model) is refused
  before a session is opened (`check_graph`; docs/security.md, "Weights").

Tokenization gives what `AutoTokenizer.from_pretrained(folder)(texts, pairs, truncation=True,
max_length=max_length, padding=True)` gives: special tokens from the tokenizer's own template,
truncation `longest_first` from the right, padding on the right to the batch's longest row with
the pad id (and token) of the tokenizer's own padding settings, else config.json's
`pad_token_id`, else 0, and token type 0 (a padding setting saved in `tokenizer.json`, such as a
fixed length of 128, is replaced by this, as transformers replaces it).

Input: a list of texts, a list of `{"text": ..., "text_pair": ...}` dicts (pair tasks), a
DataFrame with a `text` (and `text_pair`) column or a single unnamed text column (what MLflow's
schema enforcement makes of a list of texts, in process and under `mlflow models serve`), or one
text. Output: a DataFrame with `label` and `score`, as the transformers flavor and
`student_pyfunc.py` return: the label name from config.json's `id2label` and its softmax
probability (sigmoid for a single logit); for a regression model (`problem_type: regression`,
STS-B) the label of id 0 and the raw predicted value as `score`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel  # `mlflow.pyfunc` is a LazyLoader to a type checker
from tokenizers import Tokenizer

DEFAULT_BATCH_SIZE = 32
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "logits"
Row = tuple[str, str | None]


def _text(value: Any) -> str | None:
    """A cell as text; None for a missing one (None, NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


def rows_of(model_input: Any) -> list[Row]:
    """(text, text_pair or None) for every row of any input form the module docstring names."""
    if isinstance(model_input, pd.Series) or (isinstance(model_input, np.ndarray) and model_input.ndim == 2):
        model_input = pd.DataFrame(model_input)
    if isinstance(model_input, pd.DataFrame):
        if "text" in model_input.columns:
            pairs = model_input["text_pair"] if "text_pair" in model_input.columns else [None] * len(model_input)
            return [(str(a), _text(b)) for a, b in zip(model_input["text"], pairs)]
        return [(str(a), None) for a in model_input.iloc[:, 0]]
    if isinstance(model_input, (str, dict)):
        model_input = [model_input]
    rows: list[Row] = []
    for item in model_input:
        if isinstance(item, dict):
            rows.append((str(item["text"]), _text(item.get("text_pair"))))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            rows.append((str(item[0]), str(item[1])))
        else:
            rows.append((str(item), None))
    return rows


def load_tokenizer(path: str | Path, config: dict[str, Any], max_length: int | None) -> Tokenizer:
    """`tokenizer.json` set to truncate to `max_length` (None: not at all) and to pad each batch
    to its longest row, as transformers' tokenizer does with `truncation=True, padding=True`."""
    tokenizer = Tokenizer.from_file(str(path))
    saved = tokenizer.padding or {}
    pad_id = saved.get("pad_id")
    if pad_id is None:
        pad_id = config.get("pad_token_id")
    pad_id = int(pad_id) if pad_id is not None else 0
    pad_token = saved.get("pad_token") or tokenizer.id_to_token(pad_id) or "[PAD]"
    if max_length is not None:
        tokenizer.enable_truncation(int(max_length), stride=0, strategy="longest_first", direction="right")
    else:
        tokenizer.no_truncation()
    tokenizer.enable_padding(direction="right", pad_id=pad_id, pad_type_id=0, pad_token=pad_token, length=None,
                             pad_to_multiple_of=None)
    return tokenizer


def encode(tokenizer: Tokenizer, rows: Sequence[Row]) -> dict[str, np.ndarray]:
    """int64 `input_ids`, `attention_mask` and `token_type_ids` [rows, longest row] of `rows`."""
    encodings = tokenizer.encode_batch([text if pair is None else (text, pair) for text, pair in rows])
    return {
        "input_ids": np.asarray([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.asarray([e.type_ids for e in encodings], dtype=np.int64),
    }


def labels_and_scores(logits: np.ndarray, id2label: dict[int, str], problem_type: str | None) -> tuple[list[str], list[float]]:
    """The label name and its probability per row of `logits` [rows, labels] (see the docstring)."""
    logits = np.asarray(logits, dtype=np.float64)
    if problem_type == "regression":
        return [id2label.get(0, "LABEL_0")] * len(logits), [float(v) for v in logits[:, 0]]
    if logits.shape[-1] == 1:
        probs = 1.0 / (1.0 + np.exp(-logits))
    else:
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs = shifted / shifted.sum(axis=-1, keepdims=True)
    best = probs.argmax(axis=-1)
    return ([id2label.get(int(i), f"LABEL_{int(i)}") for i in best],
            [float(p) for p in np.take_along_axis(probs, best[:, None], axis=-1)[:, 0]])


def check_graph(path: Path, recorded: str | None) -> None:
    """Refuse a graph that is not the one logged: what `drydock.json`'s weights digests do for a
    student folder, here for a consumer that has no drydock (so the file is hashed here). A version
    logged before digests were recorded (`recorded` None) is not checked."""
    if not recorded:
        return
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != recorded:
        raise ValueError(f"{path.name}: SHA-256 {digest.hexdigest()}, but {recorded} was recorded when this version was logged: "
                         "the graph is not the one drydock measured and registered (swapped in the artifact store, or copied "
                         "from another model?); refusing to load it")


class OnnxTextClassifier(PythonModel):
    def load_context(self, context) -> None:
        import onnxruntime as ort

        settings = context.model_config or {}
        config = json.loads(Path(context.artifacts["config"]).read_text(encoding="utf-8"))
        self.id2label = {int(k): str(v) for k, v in (config.get("id2label") or {}).items()}
        self.problem_type = config.get("problem_type")
        max_length = settings.get("max_length")
        self.tokenizer = load_tokenizer(context.artifacts["tokenizer"], config, int(max_length) if max_length else None)
        self.batch_size = max(1, int(settings.get("batch_size") or DEFAULT_BATCH_SIZE))

        options = ort.SessionOptions()
        if settings.get("threads"):
            options.intra_op_num_threads = int(settings["threads"])
        options.inter_op_num_threads = 1  # a BERT graph is a chain: a second pool only competes for the cores
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only
        providers = list(settings.get("providers") or ["CPUExecutionProvider"])
        check_graph(Path(context.artifacts["onnx"]), settings.get("onnx_sha256"))
        self.session = ort.InferenceSession(str(context.artifacts["onnx"]), sess_options=options, providers=providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        unknown = [name for name in self.input_names if name not in INPUT_NAMES]
        if unknown:
            raise ValueError(f"{context.artifacts['onnx']}: graph inputs {unknown} are none of {list(INPUT_NAMES)}")
        outputs = [o.name for o in self.session.get_outputs()]
        self.output_name = OUTPUT_NAME if OUTPUT_NAME in outputs else outputs[0]

    def logits(self, rows: Sequence[Row]) -> np.ndarray:
        """The graph's logits for `rows`, `batch_size` rows per run, each batch padded to its longest."""
        chunks = []
        for start in range(0, len(rows), self.batch_size):
            encoded = encode(self.tokenizer, rows[start : start + self.batch_size])
            chunks.append(np.asarray(self.session.run([self.output_name], {n: encoded[n] for n in self.input_names})[0]))
        return np.concatenate(chunks) if chunks else np.zeros((0, max(1, len(self.id2label))), dtype=np.float32)

    def predict(self, context, model_input, params=None) -> pd.DataFrame:
        labels, scores = labels_and_scores(self.logits(rows_of(model_input)), self.id2label, self.problem_type)
        return pd.DataFrame({"label": labels, "score": scores})


mlflow.models.set_model(OnnxTextClassifier())
