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
# Measured 2026-12-01 (torch 2.13.0+cpu, transformers 5.24.0, onnxruntime 1.32.0, 1 thread, batches
# of 32 padded to their longest row): `predict_logits(load_runner(build_variant(folder, runtime,
# out), 1), rows, 32)` (`pipeline.measure.engines`) against the same for `torch`, over 256 rows of random token ids (tiny
# models) or SST-2 dev sentences (MiniLM, tokenized to 128; the fine-tuned teacher of `make demo`:
# all 872), every logit compared (max abs difference from eager fp32; p99 in brackets):
#
#   model                                     max |logit|  onnxruntime        onnxruntime-int8   int8 argmax = fp32
#   tiny BERT 4 × 32 (random)                 0.047        1.5e-8 (1.1e-8)    5.1e-4 (4.0e-4)    99.6%
#   tiny BERT 2 × 128, vocab 1000 (random)    0.11         3.7e-8 (3.3e-8)    1.8e-3 (1.5e-3)    99.6%
#   CoFi pruned tiny BERT (random)            0.021        6.2e-9 (4.7e-9)    4.3e-4 (3.9e-4)    100%
#   MiniLM-L6 pretrained, random 2-label head 0.054        8.5e-8 (6.5e-8)    1.1e-2 (7.3e-3)    94.1%
#   MiniLM-L6 fine-tuned on SST-2 (teacher)   2.46         5.0e-6 (2.7e-6)    0.87   (0.54)      99.0%
#
# The teacher's dev accuracy: 0.8727 eager, 0.8727 onnxruntime, 0.8693 int8 (0.8589 with one
# scale per tensor, max difference 1.62). Eager torch run again with 2 threads instead of 1: 0.0.
#
# - torch: the same eager model again; only another thread count could change a sum's order (0.0
#   measured). 1e-4 is the export's own verification tolerance (`pipeline.training.export.VERIFY_ATOL`).
# - onnxruntime: fp32 throughout; ORT's fused kernels sum in another order: at most 5e-6 × scale
#   measured, 200 times under 1e-3. A wrong graph is off by far more: another folder's weights by
#   the size of the logits (3e-2 between two tiny random models in the tests, ~1 for fine-tuned
#   ones), and a padding mask traced in as a constant would be off on every padded row.
# - onnxruntime-int8: int8 weights change the logits by design: 0.87 / 2.46 = 0.35 of the scale on
#   the teacher. 0.75 leaves twice that, and still refuses a variant whose logits are nothing like
#   the model's (zeros are off by 1 × scale; another model's by up to 2 ×). It cannot tell two
#   students of one task apart (their logits agree about as well as int8 does): what int8 costs,
#   and whether it is the right model, is settled by its own dev-set metric (`evaluate_variant`).
#
# `benchmarks/parity.py --teacher runs/teachers/<key>` measures all of it again (but the pretrained
# MiniLM row) for every runtime; its run of 2026-12-02 03:14 gave the same figures within rounding,
# except the tiny models' int8 rows (5.2e-4, 2.3e-3, 4.5e-4 max; argmax 99.2%, 100%, 98.8%).
#
# Half precision, measured 2026-12-02 the same way on the CPU (torch 2.13.0+cpu, transformers
# 5.24.0, 1 thread, a Xeon with AVX512-FP16 and AMX-BF16; `benchmarks/parity.py` gives the same
# table), max abs difference from eager fp32 (p99), and as a fraction of the logit scale:
#
#   model                                     max |logit|  torch-fp16                   torch-bf16                 argmax = fp32 (fp16, bf16)
#   tiny BERT 4 × 32 (random)                 0.046        5.8e-5 (4.3e-5)              4.3e-4 (2.9e-4)            100%, 99.6%
#   tiny BERT 2 × 128, vocab 1000 (random)    0.16         1.6e-4 (1.3e-4)              9.6e-4 (7.0e-4)            100%, 100%
#   CoFi pruned tiny BERT (random)            0.017        2.9e-5 (2.3e-5)              1.9e-4 (1.4e-4)            100%, 98.4%
#   MiniLM-L6 fine-tuned on SST-2 (teacher)   2.46         5.1e-3 (3.1e-3) = 2.1e-3 ×   4.3e-2 (2.8e-2) = 1.8e-2 ×  99.9%, 99.8%
#
# The teacher's dev accuracy: 0.8727 eager fp32, 0.8716 fp16, 0.8727 bf16.
#
# - torch-fp16, torch-bf16: every weight and activation rounded to 11 (fp16) or 8 (bf16)
#   significant bits, 2^3 apart, and bf16 was 6-9 times further from fp32 than fp16 on every
#   model above. The tolerances are about ten times the teacher's figure, 2e-2 and 0.15 × scale:
#   the error grows with depth (the teacher has 6 layers; a 24-layer model may double or triple
#   it) and a GPU sums in other orders (fp16 GEMMs may reduce in fp16, fused attention kernels), not
#   measured here. They still refuse a cast that went wrong: zeros or another model's logits are
#   off by 1-2 × scale on a fine-tuned head, a padding mask ignored by more than rounding on every
#   padded row, and an fp16 overflow gives non-finite logits (refused whatever the tolerance).
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
