"""The measurement job of the runtime variants: every planned student and the teacher in every
runtime of `selection.runtimes`, built, checked, scored on the dev set and timed interleaved at
every shape of `selection.latency.shapes`, in one process. Its result is one fact per (model,
runtime) (`VariantFacts`) and one `InterleavedResult` per shape; the select stage's variants step
(`pipeline.select.stage.variants_step`) sends it to a node and turns what comes back into
`variants.parquet` (`pipeline.measure.table`).

Why a step of its own, before the eager fp32 selection: it is the stage's one measurement when
the spec asks for variants (results.parquet's eager columns are its `torch` rows at the front's
shape: `pipeline.measure.eager`), and a variant that cannot be built or scored must never stop
the stage — it becomes a row with its `error`, and the eager results, the report and the
registry go on (a job that fails as a whole leaves eager fp32 to `measure_all`).

Why one process: ratios are only trustworthy within a round of one process
(`pipeline.measure.interleaved`), so every (model, runtime) of a shape, the teacher included, is
timed in the same worker — under Ray one `MeasuringActor` on one planned node (it reserves the
whole node, as the eager measurements do; `pipeline.measure.latency.on_one_node`),
otherwise this process. Models whose compute and runtime are the same are one measurement
(`architecture_key`); the others say which runner they were `measured_as`.

The job (`run_variant_job`) takes a `VariantJob` (a pydantic model) and returns a `VariantOutcome`
(a dataclass of `VariantFacts` and `InterleavedResult`s): Ray pickles both as they are, so nothing
is turned into dicts and back; it imports no Ray and no MLflow. The dev rows travel as texts and
labels (read once by the driver, as the stage's `judging` reads them: `labelled_split(spec,
DEV_SPLIT)`), and each folder tokenizes them with its own tokenizer at `task.max_seq_length`.

The `torch` variant is scored here too, with the same code as the others (`evaluate_variant`),
not copied from the trial's recorded metric: the report's "Δ vs fp32" of an int8 variant then
compares two figures computed the same way on the same rows, so it measures the runtime alone
(the trial's figure comes from the training loop's evaluation, and the teacher has no trial);
it costs one forward pass over the dev set per model, little beside an ONNX export.

Peak memory (`measure_memory`, `pipeline.measure.engines.measure_peak_memory`): after every
variant is built, checked and scored and before any is timed, each one is loaded anew and run
once at the largest timed shape it takes, alone, one after another: the CPU figure is the rise of
the process's peak resident set, which anything else running in the process would inflate, so it
is never measured during the interleaved timing. Where it cannot be measured (no writable
`/proc/self/clear_refs`) the column is null and the log says why; it never fails a variant.

`benchmarks/runtimes.py` uses the same pieces (`tokenize`, `out_folder`, `time_shape` with its
`latency_inputs`) for its stand-alone table.
"""

from __future__ import annotations

import math
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from pipeline.measure.interleaved import InterleavedResult, InterleaveSettings, architecture_key, group_by_key, measure_interleaved
from pipeline.measure.runtimes import EAGER, RuntimeName
from pipeline.workdir import VARIANTS_DIR  # <out_dir>/variants/<trial_id or teacher>/: the ONNX files

if TYPE_CHECKING:
    from pipeline.config import SelectionConfig, SweepSpec
    from pipeline.storage import WorkStore

Log = Callable[[str], None]
PARITY_ROWS = 32  # the reference batch: the first dev rows, padded as a serving batch is
EVAL_BATCH = 32
TEACHER = "teacher"  # the teacher's trial_id, and the first part of its runners' names


def runner_name(trial_id: str, runtime: str) -> str:
    """The key of a variant's timing in an `InterleavedResult`: "<trial_id>/<runtime>"."""
    return f"{trial_id}/{runtime}"


@dataclass(frozen=True)
class VariantFacts:
    """What the job found of one variant besides its timings: one row of variants.parquet."""

    trial_id: str  # TEACHER for the teacher
    runtime: str
    metric: float | None  # the variant's own score on the dev set
    size_bytes: int | None
    path: str | None
    parity_max_abs_diff: float | None = None
    peak_memory_bytes: int | None = None
    metric_name: str | None = None
    error: str | None = None  # could not be built, verified or scored: never a candidate


@dataclass
class DevRows:
    """The dev set as plain data: what the variants are scored on, in any process."""

    text_a: list[str]
    text_b: list[str] | None
    labels: list[float]  # class indices (ints) or regression targets, as the split holds them
    metric_names: list[str]
    primary: str
    regression: bool
    max_length: int

    @classmethod
    def of(cls, rows: Any, task: Any, max_length: int) -> DevRows:
        """From a split as `labelled_split` returns it and the task (`task_spec`)."""
        text_b = list(rows["text_b"]) if "text_b" in rows.column_names else None
        return cls(list(rows["text_a"]), text_b, list(rows["label"]), list(task.metrics),
                   task.primary_metric, bool(task.regression), int(max_length))


class VariantJob(BaseModel):
    """What one worker builds, scores and times. `models`: name → folder (or its address in the
    work `location`), the teacher under TEACHER; `out`: the folder (or address) the ONNX files go
    under; `shapes`: (batch, length) pairs; `threads`: None = the worker's own choice. Crosses a
    Ray call as it is (Ray pickles pydantic models): no dict form."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: dict[str, str]
    runtimes: list[RuntimeName]
    shapes: list[tuple[int, int]]
    dev: DevRows
    out: str  # <out_dir>/variants: each model's files in a folder of its own (`out_folder`)
    interleave: InterleaveSettings
    device: Literal["cpu", "cuda"] = "cpu"
    threads: int | None = None
    location: str | None = None


@dataclass(frozen=True)
class Host:
    """Where the job ran, as a latency is reported (`pipeline.measure.latency.Measurement`):
    results.parquet's eager figures are read off this job's timings (`pipeline.measure.eager`)."""

    hostname: str
    pid: int
    node_id: str  # the Ray node; "" when the job ran in the calling process without Ray
    device_name: str
    torch_version: str

    @classmethod
    def here(cls, device: str) -> Host:
        import torch

        from pipeline.measure.latency import device_model

        ray = sys.modules.get("ray")  # never imported for this: a job without Ray has no node
        node_id = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else ""
        return cls(platform.node(), os.getpid(), node_id or "", device_model(device), torch.__version__)


@dataclass(frozen=True)
class VariantOutcome:
    """What `run_variant_job` found: one fact per (model, runtime), one measurement per shape
    ("<batch>x<length>"), expanded to every model (`InterleavedResult.expand`), the threads
    each runner ran with and where (the worker's log lines come back beside it: `on_one_node`)."""

    facts: list[VariantFacts]
    measurements: dict[str, InterleavedResult]
    threads: int
    host: Host | None = None


@dataclass
class Entry:
    """One model in one runtime, while the job runs."""

    model: str
    folder: Path
    runtime: str
    config: dict[str, Any] = field(default_factory=dict)
    variant: Any = None  # pipeline.measure.engines.Variant
    runner: Any = None  # pipeline.measure.engines.Runner
    metrics: dict[str, float] = field(default_factory=dict)
    parity: float | None = None
    build_seconds: float = 0.0
    peak_memory_bytes: int | None = None  # `measure_memory`
    error: str | None = None

    @property
    def name(self) -> str:
        return runner_name(self.model, self.runtime)


# ----------------------------------------------------------------------------------------------
# pieces, shared with benchmarks/runtimes.py
# ----------------------------------------------------------------------------------------------


def tokenize(folder: Path, text_a: Sequence[str], text_b: Sequence[str] | None, max_length: int) -> tuple[list[dict[str, list[int]]], int]:
    """The rows tokenized by the folder's own tokenizer (truncated to `max_length`), and its pad id."""
    from transformers import AutoTokenizer

    from pipeline.prepare.remote_code import remote_code

    # the tokenizer reads config.json too: for a CoFi export (auto_map) without trust_remote_code,
    # transformers asks on stdin whether to run the code ("Do you wish to run the custom code?"),
    # which a select stage has no one to answer; its code is checked against drydock.json first
    tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=remote_code(folder))
    texts = [list(text_a)] + ([list(text_b)] if text_b is not None else [])
    encoded = tokenizer(*texts, truncation=True, max_length=max_length, return_token_type_ids=True)
    rows = [{"input_ids": ids, "token_type_ids": types} for ids, types in zip(encoded["input_ids"], encoded["token_type_ids"])]
    return rows, int(tokenizer.pad_token_id or 0)


def latency_inputs(config: Mapping[str, Any], batch: int, length: int) -> dict[str, np.ndarray]:
    """`batch × length` random token ids, full mask (as `pipeline.measure.latency`): no padding
    for a model that truncates to look fast on."""
    rng = np.random.default_rng(0)
    vocab = int(config.get("vocab_size", 2))
    input_ids = rng.integers(0, vocab, (batch, length), dtype=np.int64)
    return {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids), "token_type_ids": np.zeros_like(input_ids)}


def out_folder(out: Path, name: str) -> Path:
    """`<out>/<name>`, the name made safe for a folder."""
    return Path(out) / re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def prepare_variant(entry: Entry, rows: list[dict[str, Any]], pad_id: int, labels: Sequence[float], metric_names: Sequence[str],
                    regression: bool, out: Path, threads: int, max_length: int, device: str = "cpu") -> None:
    """Build the variant (files under `out_folder(out, model)`), load it, check it against the
    folder's eager fp32 logits on the first PARITY_ROWS rows (raises when it is off), score it
    on the rows. The entry is filled as far as it got."""
    from pipeline.measure.engines import build_variant, check_parity, evaluate_variant, load_runner, pad_batch

    started = time.perf_counter()
    entry.variant = build_variant(entry.folder, entry.runtime, out_folder(out, entry.model), seq_length_hint=max_length)
    entry.build_seconds = time.perf_counter() - started
    entry.runner = load_runner(entry.variant, threads, device)
    # on the device it is served on (fp16 on a GPU is not fp16 on a CPU), against eager fp32 on the CPU
    entry.parity = check_parity(entry.folder, entry.variant, pad_batch(rows[:PARITY_ROWS], pad_id), threads=threads, device=device)
    entry.metrics = evaluate_variant(entry.runner, rows, labels, metric_names, regression, batch_size=EVAL_BATCH, pad_id=pad_id)


def memory_shape(config: Mapping[str, Any], shapes: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """The shape of `shapes` with the most tokens (batch × length; ties: the longer) whose length
    the model takes (within `max_position_embeddings`); None when it takes none of them."""
    limit = config.get("max_position_embeddings")
    fits = [(b, n) for b, n in shapes if not limit or n <= int(limit)]
    return max(fits, key=lambda s: (s[0] * s[1], s[1])) if fits else None


def measure_memory(entries: Sequence[Entry], shapes: Sequence[tuple[int, int]], threads: int, device: str = "cpu",
                   log: Log | None = None) -> None:
    """`peak_memory_bytes` of every entry without an error: loaded anew and run once at its
    `memory_shape`, one at a time (`measure_peak_memory`). Nothing here fails an entry: a figure
    that cannot be had stays None, and the log says why (each reason once)."""
    from pipeline.measure.engines import PeakMemory, measure_peak_memory

    measured: list[str] = []
    missing: dict[str, list[str]] = {}
    for entry in entries:
        if entry.error is not None or entry.variant is None:
            continue
        shape = memory_shape(entry.config, shapes)
        if shape is None:
            missing.setdefault("no timed shape within its positions", []).append(entry.name)
            continue
        try:
            peak = measure_peak_memory(entry.variant, threads, latency_inputs(entry.config, *shape), device)
        except Exception as e:  # noqa: BLE001 — it was built, checked and scored: a failed measurement is a null figure
            peak = PeakMemory(None, f"the load or forward failed ({failure(e)})")
        entry.peak_memory_bytes = peak.bytes
        if peak.bytes is None:
            missing.setdefault(peak.method, []).append(entry.name)
        else:
            measured.append(f"{entry.name} {peak.bytes / 1e6:.3g} MB @{shape[0]}x{shape[1]}")
    if log is not None:
        if measured:
            log(f"variants: peak memory ({'torch device allocation' if device == 'cuda' else 'resident set'}): {', '.join(measured)}")
        for why, names in missing.items():
            log(f"variants: peak memory not measured for {', '.join(names)}: {why}")


def time_shape(entries: Sequence[Entry], shape: tuple[int, int], references: Sequence[str], settings: InterleaveSettings,
               log: Log | None = None, synchronize: Callable[[], object] | None = None) -> InterleavedResult:
    """Every entry without an error at this shape, one timing per architecture and runtime,
    interleaved; the result expanded to every entry (`measured_as` for those served by another's
    timing). References that are not live (their variant failed) are left out."""
    live = {e.name: e for e in entries if e.error is None and e.runner is not None}
    keys = {name: architecture_key(e.config, e.runtime, shape) for name, e in live.items()}
    refs = [ref for ref in references if ref in live]
    groups = group_by_key(keys, prefer=refs)
    runners = {rep: partial(live[rep].runner, latency_inputs(live[rep].config, *shape)) for rep in groups}
    if log is not None:
        log(f"variants: {shape[0]}x{shape[1]}: timing {len(runners)} runner(s) for {len(live)} model × runtime variant(s), interleaved")
    result = measure_interleaved(runners, refs, settings, log=log, synchronize=synchronize)
    return result.expand(groups)


# ----------------------------------------------------------------------------------------------
# the job, in whatever process runs it
# ----------------------------------------------------------------------------------------------


def failure(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[-1] if text else ''}"[:500]


def _prepare_all(job: VariantJob, folders: dict[str, Path], out: Path, threads: int, log: Log) -> list[Entry]:
    """Every model in every runtime; a failure is the entry's `error`, the others go on."""
    import json

    entries = []
    for model, folder in folders.items():
        try:
            config = json.loads((folder / "config.json").read_text())
            rows, pad_id = tokenize(folder, job.dev.text_a, job.dev.text_b, job.dev.max_length)
        except Exception as e:  # noqa: BLE001 — a broken folder is its rows' error, not the stage's
            entries += [Entry(model, folder, runtime, error=failure(e)) for runtime in job.runtimes]
            log(f"variants: {model}: cannot be read ({entries[-1].error})")
            continue
        for runtime in job.runtimes:
            entry = Entry(model, folder, runtime, config=config)
            try:
                prepare_variant(entry, rows, pad_id, job.dev.labels, job.dev.metric_names, job.dev.regression, out, threads,
                                job.dev.max_length, job.device)
            except Exception as e:  # noqa: BLE001 — a variant that fails is a row with its error
                entry.error, entry.runner = failure(e), None
            entries.append(entry)
            metric = entry.metrics.get(job.dev.primary, math.nan)
            log(f"variants: {entry.name}: " + (f"failed ({entry.error})" if entry.error else
                f"{job.dev.primary} {metric:.4f}, {entry.variant.size_bytes / 1e6:.2f} MB, parity {entry.parity:.2g}"))
    return entries


def _threads(job: VariantJob, granted: int | None) -> int:
    import torch

    return job.threads or granted or torch.get_num_threads()


def run_variant_job(job: VariantJob, log: Log = print, *, granted_threads: int | None = None) -> VariantOutcome:
    """Build, check, score and time everything `job` names, in this process. The work
    location's models are fetched first, and the ONNX files pushed back to it after (their
    `path` is then their address there)."""
    from pipeline.storage import WorkStore

    store = WorkStore.open(job.location) if job.location is not None else None
    folders = {name: store.localize(ref) if store is not None else Path(ref) for name, ref in job.models.items()}
    out_key = store.key_of(job.out) if store is not None and store.is_remote else None
    out = store.path(out_key) if store is not None and out_key is not None else Path(job.out)
    threads = _threads(job, granted_threads)
    entries = _prepare_all(job, folders, out, threads, log)
    measure_memory(entries, job.shapes, threads, job.device, log)  # alone, before any timing
    references = [runner_name(TEACHER, runtime) for runtime in job.runtimes]
    settings = job.interleave
    sync = None
    if job.device == "cuda":
        import torch

        sync = torch.cuda.synchronize
    measurements = {f"{b}x{n}": time_shape(entries, (b, n), references, settings, log, sync) for b, n in job.shapes}
    if store is not None and out_key is not None and out.is_dir():
        store.push(out_key)  # the ONNX files, where the driver and a consumer find them

    facts = [VariantFacts(
        trial_id=e.model, runtime=e.runtime, metric=e.metrics.get(job.dev.primary), metric_name=job.dev.primary,
        size_bytes=e.variant.size_bytes if e.variant is not None else None,
        path=_address(e.variant.path, store) if e.variant is not None else None, parity_max_abs_diff=e.parity,
        peak_memory_bytes=e.peak_memory_bytes, error=e.error,
    ) for e in entries]
    return VariantOutcome(facts, measurements, threads, Host.here(job.device))


# ----------------------------------------------------------------------------------------------
# the stage's side
# ----------------------------------------------------------------------------------------------


def variants_wanted(selection: SelectionConfig) -> bool:
    """Only when there is something to build or time beyond the eager fp32 measurement: another
    runtime than `torch`, or more than one shape (the smoke spec, which the test suite runs,
    asks for neither, so its sweeps cost what they did)."""
    return list(selection.runtimes) != [EAGER] or len(selection.latency.shapes) > 1


def _address(path: Path, store: WorkStore | None) -> str:
    return str(path) if store is None else store.address(path)


def variant_job(spec: SweepSpec, students: Mapping[str, Path], teacher: Path, out_dir: Path, dev: DevRows,
                store: WorkStore | None = None, interleave: Mapping[str, Any] | None = None) -> VariantJob:
    """The job for the teacher and `students` (trial_id → folder) under `spec`'s selection;
    `interleave`: `InterleaveSettings` fields over the spec's (a benchmark's knobs)."""
    latency = spec.selection.latency
    remote = store is not None and store.is_remote
    return VariantJob(
        models={TEACHER: _address(teacher, store), **{t: _address(p, store) for t, p in students.items()}},
        runtimes=list(spec.selection.runtimes), shapes=[(s.batch_size, s.seq_length) for s in latency.shapes], dev=dev,
        out=_address(out_dir / VARIANTS_DIR, store), interleave=InterleaveSettings.from_latency(latency, **(interleave or {})),
        device=latency.device, threads=latency.threads, location=store.location if remote and store is not None else None,
    )
