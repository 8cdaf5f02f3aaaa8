"""Runtime variants of a saved model: the same weights served as eager PyTorch (fp32, fp16, bf16),
ONNX Runtime fp32 and ONNX Runtime int8, each checked against the eager fp32 logits and scored on
its own, and its peak memory measured.

A user serves an encoder in a runtime, not as a folder of weights, and the runtime changes both
speed and (for int8) accuracy; so the select stage builds every variant of a student or teacher
folder, checks that it computes what the folder computes, and scores it on the dev set:

- `torch`: the folder itself, loaded as a consumer loads it (eager fp32).
- `onnxruntime`: `model.onnx`, fp32, exported with PyTorch's TorchScript-based exporter
  (`torch.onnx.export(..., dynamo=False)`), batch and sequence axes dynamic, inputs
  `input_ids`, `attention_mask` (and `token_type_ids` when the model's forward takes it), output
  `logits`. The TorchScript exporter is used, not the default torch.export-based one: in torch 2.13
  with transformers 5.24 both export a stock BERT and CoFi's pruned BERT (`_pruned_bert.py`) whose
  logits equal eager's within 1e-8 at other batch sizes and lengths, but the torch.export one took
  24-49 s for a 4-layer, 32-wide BERT on this 2-core machine (under load) against 1.4-1.5 s, and
  prints its progress; a sweep pays an export per student. The TorchScript exporter is deprecated
  (a DeprecationWarning); when it goes, `_export_onnx` is the one place to switch, and the parity
  check below is what says whether the other exporter's graph is right.
- `onnxruntime-int8`: `model.int8.onnx`, ONNX Runtime's dynamic quantization
  (`quantize_dynamic`: int8 weights, one scale per output channel, of every MatMul whose weight is
  a constant — all the linear layers — and uint8 activations quantized at run time). Per-channel,
  because on the fine-tuned SST-2 MiniLM teacher one scale per tensor cost 1.4 accuracy points
  (0.873 → 0.859) and per-channel 0.3 (→ 0.869), at the same speed and +0.5% size (figures under
  `TOLERANCES`). Before it, `quant_pre_process`, which the quantizer asks for (it logs "Please
  consider to run pre-processing before quantization"): ONNX shape inference and a basic graph
  optimisation (constant folding; the int8 file is 22% smaller for it on a tiny BERT). Its
  symbolic shape inference is skipped: it stops with "Incomplete symbolic shape inference" on
  the traced attention-mask subgraph of transformers' BERT, and without it the same MatMuls are
  quantized (26 of 34 in a 4-layer BERT: all but the 8 attention products, whose both operands are
  activations).
- `torch-fp16`, `torch-bf16`: the folder loaded as `torch` is, in half precision
  (`from_pretrained(dtype=...)`, then every floating parameter and buffer cast: what a consumer
  serving on a GPU runs); inputs stay int64 token ids, logits come back as float32. Nothing is
  written. What GPUs serve in (the cuda default adds `torch-fp16`); the spec takes them on a CPU
  too, where they pay only with half-precision units (AVX512-BF16/AMX, AVX512-FP16; a CPU without
  them has no fast kernels: not measured, this machine has the units). torch 2.13 has fp16 and
  bf16 matmul, LayerNorm, softmax and SDPA on the CPU, which is how the tests check them. On this
  machine's Xeon the teacher's 872 dev sentences took 2.7 s in bf16, 7.9 s in fp16 and 7.6 s in
  fp32 (one thread, load included, one run of `benchmarks/parity.py`). fp16 keeps 10 mantissa bits and bf16 7 (fp32: 23), so
  they are checked against fp32 with tolerances of their own (`TOLERANCES`).

Every variant's peak memory is measured apart from its timing (`measure_peak_memory`): loaded
anew, one forward at the given inputs, the rise of the process's peak resident set (or, for the
eager runtimes on cuda, of torch's peak device allocation) over what was there before.

Files are keyed by content: beside each `.onnx` a stamp (`<file>.stamp.json`) records the digest of
the folder it was built from (config, weights and custom code: `source_digest`), the recipe
(exporter, opset, library versions) and the digest of the `.onnx` itself. An existing file is
reused only when all three match, so a retrained student, a changed `_pruned_bert.py`, a torch
upgrade or a file edited by hand all give a fresh export, never a stale one. Files are written
under a temporary name and renamed into place, so a reader never sees half a file.

The module imports no Ray and no MLflow: it runs in a select-stage worker, a benchmark script or a
test alike.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pipeline.errors import DrydockError
from pipeline.measure.runtimes import HALF_RUNTIMES, NAMES, ONNX_RUNTIMES, ORT, ORT_INT8, RUNTIMES, TOLERANCES, TORCH, TORCH_DTYPES
from pipeline.prepare.metrics import compute_metrics
from pipeline.prepare.padding import is_dataset, length_batches, pad_batch
from pipeline.prepare.remote_code import file_sha256, remote_code
from pipeline.workdir import atomic_path

if TYPE_CHECKING:
    import torch

# the runtimes, their dtypes and tolerances: `pipeline.measure.runtimes` (the tolerances' measurements are there)

ONNX_FILE, INT8_FILE = (str(RUNTIMES[name].file) for name in (ORT, ORT_INT8))
STAMP_SUFFIX = ".stamp.json"
OPSET = 17  # LayerNormalization is one ONNX op from opset 17 on (one ORT kernel, not a decomposition)
EXPORTER = "torchscript"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "logits"
# what a folder's computation depends on: its config, its weights (any format, sharded or not)
# and its custom code (CoFi's architecture)
SOURCE_PATTERNS = ("config.json", "*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.py")


@dataclass(frozen=True)
class Variant:
    """One runtime's form of a model folder: what to load, and what a consumer would ship.

    `path` is the folder for the eager runtimes (`torch`, `torch-fp16`, `torch-bf16`) and the
    `.onnx` file for the ONNX runtimes; `files` are the files `size_bytes` is counted from (the
    weights for the eager runtimes — at 2 bytes a weight for fp16 and bf16 —, the `.onnx` file
    and any external data for ONNX); `source` and `source_digest` name the folder and the content
    it was built from.
    """

    runtime: str
    path: Path
    size_bytes: int
    source: Path
    source_digest: str
    files: tuple[Path, ...] = field(default=())
    reused: bool = False  # True: an up-to-date file from an earlier call served (no export ran)


# ----------------------------------------------------------------------------------------------
# building
# ----------------------------------------------------------------------------------------------


def source_files(folder: Path) -> list[Path]:
    """The files whose content decides the model's function (`SOURCE_PATTERNS`), sorted."""
    found = {p for pattern in SOURCE_PATTERNS for p in Path(folder).rglob(pattern) if p.is_file()}
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def source_digest(folder: Path) -> str:
    """SHA-256 over the names and contents of `source_files`: changes with any weight or config."""
    folder = Path(folder)
    files = source_files(folder)
    if not (folder / "config.json").is_file():
        raise DrydockError(f"{folder}: not a saved model folder (no config.json)")
    total = hashlib.sha256()
    for path in files:
        total.update(f"{path.relative_to(folder).as_posix()}\0{file_sha256(path)}\n".encode())
    return total.hexdigest()


def weight_files(folder: Path) -> list[Path]:
    """What a consumer ships as the torch variant's weights: the safetensors (else the .bin files)."""
    folder = Path(folder)
    return sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))


def weights_bytes(files: Sequence[Path], float_itemsize: int) -> int:
    """The bytes of the tensors in `files` (safetensors or PyTorch `.bin`) with every floating
    tensor at `float_itemsize` bytes an element (2: fp16 or bf16) and the others as stored.
    Safetensors: read from the header alone (no tensor is loaded)."""
    total = 0
    for path in files:
        if path.suffix == ".safetensors":
            with open(path, "rb") as f:
                header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                start, end = info["data_offsets"]
                numel = int(np.prod(info["shape"], dtype=np.int64))
                floating = info["dtype"] in {"F64", "F32", "F16", "BF16"} or info["dtype"].startswith("F8")
                total += numel * float_itemsize if floating else end - start
        else:
            import torch

            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            seen = set()  # tied weights share a storage, saved once
            for tensor in state.values():
                storage = tensor.untyped_storage()
                if storage.data_ptr() in seen:
                    continue
                seen.add(storage.data_ptr())
                size = storage.nbytes()
                total += size // tensor.element_size() * float_itemsize if tensor.is_floating_point() else size
    return total


def build_variant(folder: Path, runtime: str, out_dir: Path, *, seq_length_hint: int = 128) -> Variant:
    """The `runtime` variant of the model in `folder`, its files written into `out_dir`.

    `torch`, `torch-fp16` and `torch-bf16` write nothing (the folder is the variant).
    `onnxruntime` writes `model.onnx`; `onnxruntime-int8` writes `model.onnx` (which it is
    quantized from) and `model.int8.onnx`. An existing file is reused when its stamp says it was
    built from this folder's content with this recipe and the file is intact.
    `seq_length_hint` is the length of the example the exporter traces (capped at the model's
    positions); the axes stay dynamic whatever it is.
    """
    if runtime not in NAMES:
        raise DrydockError(f"runtime {runtime!r}: unknown; known: {', '.join(NAMES)}")
    folder = Path(folder)
    digest = source_digest(folder)
    if runtime == TORCH:
        weights = weight_files(folder)
        return Variant(TORCH, folder, sum(p.stat().st_size for p in weights), folder, digest, tuple(weights))
    if runtime in HALF_RUNTIMES:
        # Nothing is written: the folder is loaded and cast. The size is the weights' bytes at
        # that dtype — what the served model holds, and (within the file's header, a few kB)
        # what a consumer ships who saves the cast model (`save_pretrained` after `.half()`):
        # half the fp32 file. `files` are the fp32 weights it is computed from.
        weights = weight_files(folder)
        return Variant(runtime, folder, weights_bytes(weights, 2), folder, digest, tuple(weights))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / ONNX_FILE
    recipe = {"exporter": EXPORTER, "opset": OPSET, "torch": _version("torch"), "transformers": _version("transformers")}
    reused = _fresh(fp32, digest, recipe)
    if not reused:
        _export_onnx(folder, fp32, seq_length_hint)
        _write_stamp(fp32, digest, recipe)
    if runtime == ORT:
        return _onnx_variant(ORT, fp32, folder, digest, reused)
    int8 = out_dir / INT8_FILE
    int8_recipe = {**recipe, "onnxruntime": _version("onnxruntime"), "weights": "QInt8 per-channel", "from": file_sha256(fp32)}
    reused = _fresh(int8, digest, int8_recipe)
    if not reused:
        _quantize(fp32, int8)
        _write_stamp(int8, digest, int8_recipe)
    return _onnx_variant(ORT_INT8, int8, folder, digest, reused)


def load_model(folder: Path, dtype: str = "float32"):
    """The folder's model as a consumer loads it: eval mode, in `dtype` (fp32 unless said: a
    half-precision runtime's "float16" or "bfloat16", every floating parameter and buffer cast),
    custom code only when it is the recorded code (`remote_code` raises otherwise, before
    anything is imported)."""
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    trust = remote_code(folder)
    torch_dtype = getattr(torch, dtype)
    # half precision: cast while loading, as a consumer serving it does; fp32 as before (whatever
    # the folder holds, then cast)
    kwargs = {"dtype": torch_dtype} if torch_dtype != torch.float32 else {}
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), trust_remote_code=trust, **kwargs)
    return model.to(torch_dtype).eval()


def model_inputs(model) -> tuple[str, ...]:
    """The inputs of `INPUT_NAMES` the model's forward takes (DistilBERT has no token_type_ids)."""
    parameters = inspect.signature(model.forward).parameters
    names = tuple(name for name in INPUT_NAMES if name in parameters)
    if names[:2] != INPUT_NAMES[:2]:
        raise DrydockError(f"{type(model).__name__}: its forward does not take input_ids and attention_mask; cannot export it")
    return names


def _export_onnx(folder: Path, target: Path, seq_length_hint: int) -> None:
    import torch

    model = load_model(folder)
    names = model_inputs(model)
    length = max(2, min(seq_length_hint, int(getattr(model.config, "max_position_embeddings", seq_length_hint))))
    example = _example_inputs(names, int(model.config.vocab_size), length)

    class LogitsOnly(torch.nn.Module):
        """Positional inputs in `names` order, the logits tensor out: one ONNX output, named."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(names, inputs))).logits

    axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "sequence"} for name in names}
    axes[OUTPUT_NAME] = {0: "batch"}
    with atomic_path(target) as tmp, warnings.catch_warnings(), torch.no_grad():
        # The legacy exporter says it is deprecated (see the module docstring). It also warns of
        # tracing Python booleans in transformers' mask code — a padding check that compares the
        # mask's length with the sequence's (equal by construction) and the SDPA `is_causal`
        # switch (False for an encoder) — and of `aten::index` with negative indices, which only
        # the padding-mask lookup uses, with arange indices. None changes the graph at another
        # shape; the tests export at one shape and compare at others, padded rows included.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=r"Exporting aten::index operator")
        torch.onnx.export(
            LogitsOnly().eval(), tuple(example[name] for name in names), str(tmp),
            input_names=list(names), output_names=[OUTPUT_NAME], dynamic_axes=axes,
            opset_version=OPSET, do_constant_folding=True, dynamo=False,
        )


def _example_inputs(names: Sequence[str], vocab_size: int, length: int) -> dict[str, torch.Tensor]:
    """Two rows, the second padded to half the length, so the traced graph includes the mask."""
    import torch

    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(min(5, vocab_size - 1), vocab_size, (2, length), generator=g)
    attention_mask = torch.ones(2, length, dtype=torch.long)
    attention_mask[1, length // 2 :] = 0
    inputs = {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask, "token_type_ids": torch.zeros_like(input_ids)}
    return {name: inputs[name] for name in names}


def _quantize(fp32: Path, target: Path) -> None:
    import logging

    # onnxruntime ships no type information (no py.typed, no stubs)
    from onnxruntime.quantization import QuantType, quant_pre_process, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".quant-") as tmp_dir:
        prepared = Path(tmp_dir) / "prepared.onnx"
        quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
        with atomic_path(target) as tmp:
            # the quantizer logs through the root logger; with a pre-processed model it has
            # nothing to say, but a future version's advice should not reach a sweep's output
            # as an unexplained line per student
            root = logging.getLogger()
            level = root.level
            root.setLevel(max(level, logging.ERROR))
            try:
                quantize_dynamic(str(prepared), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
            finally:
                root.setLevel(level)


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + STAMP_SUFFIX)


def _write_stamp(path: Path, digest: str, recipe: dict[str, Any]) -> None:
    stamp = {"source_digest": digest, "recipe": recipe, "sha256": file_sha256(path)}
    with atomic_path(_stamp_path(path)) as tmp:
        tmp.write_text(json.dumps(stamp, indent=2, sort_keys=True))


def _fresh(path: Path, digest: str, recipe: dict[str, Any]) -> bool:
    """Whether `path` is the file this folder's content and this recipe would give, untouched."""
    stamp_path = _stamp_path(path)
    if not (path.is_file() and stamp_path.is_file()):
        return False
    try:
        stamp = json.loads(stamp_path.read_text())
    except (UnicodeDecodeError, ValueError):
        return False
    return (
        isinstance(stamp, dict) and stamp.get("source_digest") == digest and stamp.get("recipe") == recipe
        and stamp.get("sha256") == file_sha256(path)
    )


def _onnx_variant(runtime: str, path: Path, folder: Path, digest: str, reused: bool) -> Variant:
    files = onnx_files(path)
    return Variant(runtime, path, sum(p.stat().st_size for p in files), folder, digest, tuple(files), reused)


def onnx_files(path: Path) -> list[Path]:
    """The `.onnx` file and the external-data files its initializers name (none below 2 GB)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    external = {
        entry.value for tensor in model.graph.initializer if tensor.data_location == onnx.TensorProto.EXTERNAL
        for entry in tensor.external_data if entry.key == "location"
    }
    return [path, *(path.parent / name for name in sorted(external))]


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


# ----------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------


class Runner(Protocol):
    """A variant loaded for inference: `runner(inputs) -> logits` (numpy float32, [batch, labels]).

    `inputs` maps input names to numpy arrays or torch tensors of token ids ([batch, sequence]);
    names the model does not take (`labels`, or `token_type_ids` for a model without them) are
    ignored. `threads` is the intra-op thread count every call runs with.
    """

    runtime: str
    input_names: tuple[str, ...]
    threads: int

    def __call__(self, inputs: Mapping[str, Any]) -> np.ndarray: ...


class TorchRunner:
    """Eager PyTorch: `runtime` one of TORCH_DTYPES (fp32, fp16 or bf16 weights and activations;
    int64 token ids in, float32 logits out whatever the dtype)."""

    def __init__(self, folder: Path, threads: int, device: str = "cpu", runtime: str = TORCH) -> None:
        import torch

        if runtime not in TORCH_DTYPES:
            raise DrydockError(f"runtime {runtime!r}: not an eager PyTorch runtime ({', '.join(TORCH_DTYPES)})")
        self.runtime, self.threads = runtime, threads
        self.device = torch.device(device)
        self.model = load_model(folder, TORCH_DTYPES[runtime]).to(self.device)
        self.input_names = model_inputs(self.model)

    def __call__(self, inputs: Mapping[str, Any]) -> np.ndarray:
        import torch

        # torch's thread count is per process: set it for the call and give it back, so a runner
        # keeps its count whatever else the process runs between calls
        previous = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            batch = {name: torch.as_tensor(np.asarray(inputs[name]), dtype=torch.long).to(self.device) for name in self.input_names}
            with torch.no_grad():
                return self.model(**batch).logits.float().cpu().numpy()
        finally:
            torch.set_num_threads(previous)


class OrtRunner:
    def __init__(self, variant: Variant, threads: int, device: str = "cpu") -> None:
        import onnxruntime as ort

        self.runtime, self.threads = variant.runtime, threads
        options = ort.SessionOptions()
        # intra-op threads are the ones a latency figure states; inter-op 1: a BERT graph is a
        # chain, and a second pool would only compete with the first for the same cores
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: ORT's per-session notices are not the user's business
        providers = ["CPUExecutionProvider"]
        if device == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise DrydockError(f"{variant.path}: device cuda, but this onnxruntime build has no CUDA provider")
            providers = ["CUDAExecutionProvider", *providers]
        self.session = ort.InferenceSession(str(variant.path), sess_options=options, providers=providers)
        self.input_names = tuple(i.name for i in self.session.get_inputs())

    def __call__(self, inputs: Mapping[str, Any]) -> np.ndarray:
        feed = {name: _int64(inputs[name]) for name in self.input_names}
        return np.asarray(self.session.run([OUTPUT_NAME], feed)[0], dtype=np.float32)


def _int64(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value, dtype=np.int64)


def load_runner(variant: Variant, threads: int, device: str = "cpu") -> Runner:
    """The variant ready to run with `threads` intra-op threads (ONNX Runtime: all graph
    optimisations on, the CPU provider, the CUDA one first for `device="cuda"` when installed)."""
    if threads < 1:
        raise DrydockError(f"threads: {threads}; at least 1")
    if variant.runtime in TORCH_DTYPES:
        return TorchRunner(variant.path, threads, device, variant.runtime)
    if variant.runtime in ONNX_RUNTIMES:
        return OrtRunner(variant, threads, device)
    raise DrydockError(f"runtime {variant.runtime!r}: unknown; known: {', '.join(NAMES)}")


# ----------------------------------------------------------------------------------------------
# checking and scoring
# ----------------------------------------------------------------------------------------------


def logit_scale(logits: np.ndarray) -> float:
    """max(1, max |logit|): what `TOLERANCES` are multiplied by (see there)."""
    return max(1.0, float(np.max(np.abs(logits)))) if logits.size else 1.0


def check_parity(folder: Path, variant: Variant, batch: Mapping[str, Any], *, threads: int = 1, device: str = "cpu",
                 tolerances: Mapping[str, float] = TOLERANCES) -> float:
    """The max abs difference between the variant's logits, run on `device` (where it is served),
    and the folder's eager fp32 logits on the CPU on `batch`. A `DrydockError` naming the folder,
    the runtime, the difference and the tolerance when it exceeds `tolerances[runtime] ×
    logit_scale` (or the shapes differ, or a logit is not finite): such a variant does not compute
    what the folder computes."""
    folder = Path(folder)
    expected = TorchRunner(folder, threads)(batch)
    got = load_runner(variant, threads, device)(batch)
    where = f"{folder}: the {variant.runtime} variant ({variant.path})"
    if got.shape != expected.shape:
        raise DrydockError(f"{where} gives logits of shape {got.shape}, the model {expected.shape}")
    if not np.all(np.isfinite(got)):
        raise DrydockError(f"{where} gives non-finite logits")
    difference = float(np.max(np.abs(got - expected))) if got.size else 0.0
    scale = logit_scale(expected)
    tolerance = tolerances[variant.runtime] * scale
    if difference > tolerance:
        raise DrydockError(
            f"{where} differs from the eager fp32 logits by {difference:.3g} (max abs), more than the "
            f"{tolerance:.3g} allowed for {variant.runtime} ({tolerances[variant.runtime]:g} × logit scale {scale:.3g})"
        )
    return difference


def _rows(chunk: Any) -> list[Mapping[str, Any]]:
    """A slice of a `datasets.Dataset` is a dict of columns; a slice of a list is a list of rows."""
    if isinstance(chunk, Mapping):
        return [dict(zip(chunk, values)) for values in zip(*chunk.values())]
    return list(chunk)


def predict_logits(runner: Callable[[Mapping[str, Any]], np.ndarray], rows: Any, batch_size: int = 32, pad_id: int = 0) -> np.ndarray:
    """Logits for every tokenized row (a list of {input_ids[, token_type_ids]} mappings, or a
    tokenized `datasets.Dataset`), in order, `batch_size` rows at a time. The batches take the
    rows by length, as the training loop's evaluation does (`pipeline.training.evaluation`), so
    each pads to about its own rows' length; a dynamically quantized runtime's figures depend a
    little on which rows share a batch, and these are the batches it is scored on."""
    if not len(rows):
        return np.zeros((0, 0), dtype=np.float32)
    batches, back = length_batches(rows, batch_size)
    take = (lambda picks: _rows(rows[picks])) if is_dataset(rows) else (lambda picks: [rows[i] for i in picks])
    return np.concatenate([runner(pad_batch(take(picks), pad_id)) for picks in batches])[back]


def evaluate_variant(
    runner: Callable[[Mapping[str, Any]], np.ndarray], rows: Any, labels: Sequence[float] | np.ndarray,
    metric_names: Sequence[str], regression: bool, *, batch_size: int = 32, pad_id: int = 0,
) -> dict[str, float]:
    """The task's metrics (`pipeline.prepare.metrics.compute_metrics`: accuracy, F1, MCC,
    Pearson/Spearman, `combined`) of the runner's own predictions on labelled rows: an int8
    variant is ranked by what it scores, not by what its fp32 model scored."""
    labels = np.asarray(labels)
    if not len(rows):
        raise DrydockError("no rows to evaluate the variant on")
    if len(labels) != len(rows):
        raise DrydockError(f"{len(rows)} rows but {len(labels)} labels")
    logits = predict_logits(runner, rows, batch_size, pad_id)
    return compute_metrics(list(metric_names), logits, labels, regression)



# ----------------------------------------------------------------------------------------------
# peak memory
# ----------------------------------------------------------------------------------------------

# Linux: writing "5" to clear_refs resets the process's peak resident set (VmHWM in status) to its
# current resident set (since Linux 4.0; checked on 6.18 here). Module attributes, so a test can
# point them elsewhere.
CLEAR_REFS = Path("/proc/self/clear_refs")
PROC_STATUS = Path("/proc/self/status")
HWM_SLACK = 1 << 20  # right after the reset VmHWM must equal VmRSS (within this): else it was not reset


@dataclass(frozen=True)
class PeakMemory:
    """`bytes`: the variant's peak memory, None when it could not be measured; `method`: how it
    was measured, or why not (one line, for the log)."""

    bytes: int | None
    method: str


def measure_peak_memory(variant: Variant, threads: int, inputs: Mapping[str, Any], device: str = "cpu") -> PeakMemory:
    """What loading the variant anew and running one forward on `inputs` takes, over what the
    process held before; the runner is dropped after. Never raises for want of a way to measure
    (the figure is then None and `method` says why); a load or forward that fails raises.

    - CPU (every runtime): the process's peak resident set. Free heap memory is handed back to
      the OS first (glibc's `malloc_trim`), so the load and the forward cannot hide in pages the
      process already held (the cyclic collector is off throughout, for the same reason); then
      VmHWM is reset (`CLEAR_REFS`), the variant loaded and run, and the figure is VmHWM after
      minus VmHWM right after the reset. It counts the weights as loaded (ONNX Runtime's
      initializers, torch's tensors; for torch also the safetensors pages mapped while loading),
      the activations, ONNX Runtime's arena, whatever the allocators round up to, and any lazy
      initialisation the process had not done yet (kernels of a dtype not run before): for a
      model of megabytes, an upper bound of the variant's own, what a serving process needs
      beyond the interpreter and its libraries (those are in the baseline). For `torch-fp16` and
      `torch-bf16` it includes the fp32 file's pages, mapped while the weights are cast. It is
      coarse: what fits in heap pages the process already holds in part is not seen (a test
      model of tens of kB can read 0), and the same variant measured twice in one process
      differed by up to 25% (docs/runtimes.md, "Peak memory"). The resident set is the process's, so nothing else may
      run in the process meanwhile — one variant at a time, before or after timing, never during
      it. Without a writable `CLEAR_REFS` (not Linux, an older kernel, a sandbox) or when VmHWM
      does not follow the reset: None.
    - cuda, eager runtimes: torch's peak device allocation (`torch.cuda.max_memory_allocated`
      after `reset_peak_memory_stats`) over what was allocated before: weights and activations
      on the GPU, not the CUDA context or the allocator's cached but unused blocks. ONNX Runtime
      on cuda: None (its device memory is not torch's to count).
    """
    if device == "cuda":
        if variant.runtime not in TORCH_DTYPES:
            return PeakMemory(None, f"{variant.runtime} on cuda: its device memory is outside torch's allocator, not measured")
        return _cuda_peak(lambda: _load_and_run(variant, threads, device, inputs))
    return _host_peak(lambda: _load_and_run(variant, threads, device, inputs))


def _load_and_run(variant: Variant, threads: int, device: str, inputs: Mapping[str, Any]) -> None:
    runner = load_runner(variant, threads, device)
    runner(inputs)


def _proc_status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes (absent when the kernel does not give them)."""
    values = {}
    for line in PROC_STATUS.read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            number, _, unit = rest.strip().partition(" ")
            values[name] = int(number) * (1024 if unit.strip() == "kB" else 1)
    return values


def _release_free_heap() -> None:
    """Hand freed heap memory back to the OS (glibc's `malloc_trim`, a millisecond; elsewhere nothing)."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class _no_gc:
    """The cyclic collector off for the block: garbage it would free mid-measurement could hand the
    variant memory the baseline counted (an underestimate). No `gc.collect()` before either: with
    transformers imported a full collection takes 0.5 s, and garbage left in the baseline is
    counted there, not in the figure."""

    def __enter__(self) -> None:
        import gc

        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        import gc

        if self.enabled:
            gc.enable()


def _host_peak(run: Callable[[], None]) -> PeakMemory:
    with _no_gc():
        _release_free_heap()
        try:
            with open(CLEAR_REFS, "w") as f:
                f.write("5")
            start = _proc_status()
        except OSError as e:
            return PeakMemory(None, f"cannot reset the peak resident set ({e.filename or CLEAR_REFS}: {e.strerror or e})")
        if "VmHWM" not in start or "VmRSS" not in start:
            return PeakMemory(None, f"{PROC_STATUS} gives no VmHWM/VmRSS")
        if start["VmHWM"] > start["VmRSS"] + HWM_SLACK:
            return PeakMemory(None, f"writing 5 to {CLEAR_REFS} did not reset VmHWM ({start['VmHWM']} B, resident {start['VmRSS']} B)")
        run()
        return PeakMemory(max(0, _proc_status()["VmHWM"] - start["VmHWM"]), "peak resident set (VmHWM) over the process's before")


def _cuda_peak(run: Callable[[], None]) -> PeakMemory:
    import torch

    with _no_gc():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        run()
        torch.cuda.synchronize()
        return PeakMemory(max(0, torch.cuda.max_memory_allocated() - before), "torch.cuda.max_memory_allocated over the allocated before")
