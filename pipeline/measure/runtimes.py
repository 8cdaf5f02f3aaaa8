"""The runtimes a model is timed and served in: one `Runtime` entry per runtime, and the only
place their names are written.

A user serves an encoder in a runtime, not as a folder of weights, and every stage that touches
a runtime asks this table rather than spelling names of its own: the spec's valid
`selection.runtimes` and their per-device defaults (`pipeline.config`), how a variant is built
and loaded and how far its logits may be from eager fp32 (`pipeline.measure.engines`), which
runtime every speedup is over and which one the stack summary calls "int8"
(`pipeline.select.variants`), how the registry logs a version for serving
(`pipeline.select.variant_registry`) and the words the report labels them with.

- `torch`: the folder itself, loaded as a consumer loads it (eager fp32).
- `onnxruntime`: `model.onnx`, fp32, exported from the folder.
- `onnxruntime-int8`: `model.int8.onnx`, ONNX Runtime's dynamic quantization of that file.
- `torch-fp16`, `torch-bf16`: the folder loaded as `torch` is, cast to half precision (what GPUs
  serve in); nothing is written.

`pipeline.measure.engines` says how each is built and checked, and why. This module imports
nothing heavy (no torch, no onnx): `pipeline.config` imports it to validate a spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

# the names, once: a spec's `selection.runtimes` takes these (`pipeline.config.SelectionConfig`)
RuntimeName = Literal["torch", "onnxruntime", "onnxruntime-int8", "torch-fp16", "torch-bf16"]
Engine = Literal["torch", "onnxruntime"]  # what loads and runs a runtime's form of a model
Serving = Literal["eager", "cast", "onnx"]  # how the registry logs a version: as saved, cast to `dtype`, an ONNX pyfunc
TORCH, ORT, ORT_INT8, TORCH_FP16, TORCH_BF16 = get_args(RuntimeName)


@dataclass(frozen=True)
class Runtime:
    """One runtime: what runs it, in which dtype or from which file, how far its logits may be
    from eager fp32 (`tolerance`, × the logit scale: see `TOLERANCES` below), how the registry
    serves it, the report's short word for it, and the devices whose default list has it."""

    name: RuntimeName
    engine: Engine
    dtype: str | None  # the torch dtype an eager runtime runs the model in; None for ONNX Runtime
    file: str | None  # the file the runtime's form is written to; None: the folder is the form
    tolerance: float
    serving: Serving
    pyfunc: str  # the MLflow model-from-code file (beside this module) a consumer's pyfunc version runs
    label: str  # "fp32", "int8": how the report's stack summary names a step in this runtime
    default_on: tuple[str, ...] = ()  # devices ("cpu", "cuda") that time it when a spec names no runtime

    @property
    def half(self) -> bool:
        """Eager PyTorch in half precision: what GPUs serve in."""
        return self.engine == "torch" and self.dtype != "float32"


# TOLERANCES: how far a variant's logits may be from the eager fp32 PyTorch logits of the same folder on the
# same batch before it counts as broken: max |variant - fp32| <= TOLERANCES[runtime] × the logit
# scale, max(1, max |fp32 logit|) — absolute for logits within ±1 (random heads, tests), relative
# for a fine-tuned head's larger logits, whose int8 error grows with them.
#
# Each tolerance rests on measured parity figures (the teacher of `make demo` and tiny models, every
# runtime, `benchmarks/parity.py`): the tables and why each figure is what it is are in
# docs/runtimes.md, "Parity tolerances". A wrong variant (another model's weights, zeros, a padding
# mask traced in as a constant) is off by 1-2 × scale, far beyond any of them.
RUNTIMES: dict[str, Runtime] = {r.name: r for r in (
    Runtime(TORCH, "torch", "float32", None, 1e-4, "eager", "student_pyfunc.py", "fp32", default_on=("cpu", "cuda")),
    Runtime(ORT, "onnxruntime", None, "model.onnx", 1e-3, "onnx", "onnx_pyfunc.py", "onnx fp32"),
    Runtime(ORT_INT8, "onnxruntime", None, "model.int8.onnx", 0.75, "onnx", "onnx_pyfunc.py", "int8", default_on=("cpu",)),
    Runtime(TORCH_FP16, "torch", "float16", None, 2e-2, "cast", "student_pyfunc.py", "fp16", default_on=("cuda",)),
    Runtime(TORCH_BF16, "torch", "bfloat16", None, 0.15, "cast", "student_pyfunc.py", "bf16"),
)}
NAMES: tuple[RuntimeName, ...] = tuple(r.name for r in RUNTIMES.values())
EAGER = TORCH  # eager fp32: always timed, and every `speedup` is over the teacher in it
QUANTIZED = ORT_INT8  # the "int8" of the report's stack summary (teacher fp32 → int8 → student fp32 → int8)
TOLERANCES: dict[str, float] = {r.name: r.tolerance for r in RUNTIMES.values()}
TORCH_DTYPES: dict[str, str] = {r.name: r.dtype for r in RUNTIMES.values() if r.engine == "torch" and r.dtype}
HALF_RUNTIMES = tuple(r.name for r in RUNTIMES.values() if r.half)  # what GPUs serve in
CPU_RUNTIMES = tuple(r.name for r in RUNTIMES.values() if not r.half)  # what a CPU serves with: what a CPU benchmark builds
ONNX_RUNTIMES = tuple(r.name for r in RUNTIMES.values() if r.engine == "onnxruntime")
# what a spec that names no runtime gets: what users serve encoders with on each device (CPUs: ONNX
# Runtime int8; GPUs: fp16), beside eager fp32, which is always timed (`pipeline.config.SelectionConfig`)
DEFAULT_RUNTIMES: dict[str, tuple[RuntimeName, ...]] = {
    device: tuple(r.name for r in RUNTIMES.values() if device in r.default_on) for device in ("cpu", "cuda")
}


def runtime(name: str) -> Runtime:
    """The entry of `name`; a `KeyError` naming the known runtimes otherwise."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise KeyError(f"runtime {name!r}: unknown; known: {', '.join(NAMES)}") from None


def pyfunc_module(name: str) -> Path:
    """The pyfunc file a consumer's version in this runtime runs (logged as an MLflow model from
    code: the file's content travels with the version, so a version keeps the code it was
    registered with): `pipeline/measure/student_pyfunc.py` for the eager runtimes, the fp32
    folder cast as the runtime says; `pipeline/measure/onnx_pyfunc.py` for ONNX Runtime."""
    return Path(__file__).with_name(runtime(name).pyfunc)


def label(name: str) -> str:
    """The report's word for a runtime ("fp32", "int8"); the name itself for one not in the table."""
    return RUNTIMES[name].label if name in RUNTIMES else name
