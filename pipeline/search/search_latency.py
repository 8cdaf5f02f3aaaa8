"""The student's latency as the search sees it: the second objective of a multi-objective study,
known when a configuration is told, long before the select stage times the front interleaved.

Each configuration is timed from its first seed's export, loaded as a consumer loads it, at the
selection's front shape on its device, by the measure stage's engine (warm-up, then timed passes
until the median is stable) over a short window, in every runtime of `selection.runtimes`; its
latency is the fastest of them. The select stage's front is over (configuration, runtime), so a
configuration's best chance on it is its fastest variant: with `[torch, onnxruntime-int8]` on a
CPU the front's students are mostly int8, and steering the search by eager fp32 alone would rank
architectures by a runtime the user does not serve (an ONNX Runtime int8 export of a shallower
student does not speed up by the same factor as eager fp32). Every runtime, eager included, is
built and run as the select stage's variants job does (`build_variant`, `load_runner`), an ONNX
file in a scratch folder removed once timed, once per architecture. The export and its
quantization run where the configuration is told, in the searcher (Tune's loop in the sweep's
process): seconds for a small student on a CPU, paid once per architecture. Students of one architecture
take the same time whatever their weights, so the figure is cached per architecture (the shape
fields of the export's config.json): a dense student of a depth already timed costs nothing, and
a pruned CoFi student, whose shape its training decided, is timed once its export exists. The
select stage still re-measures the front, interleaved with the teacher, in every runtime of
`selection.runtimes`: these figures only steer the search (timed beside running trials, they are
noisier than the select stage's). With `device: cuda` and no CUDA device in this process (a
cluster's CPU-only head), each timing runs as a Ray task holding one GPU on a node that has one,
the export read through the work location (docs/search.md, "On a cluster whose head has no GPU").
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.config import LatencyConfig
from pipeline.measure.interleaved import architecture_key
from pipeline.measure.latency import time_alone
from pipeline.measure.runtimes import EAGER
from pipeline.search.outcome import OUTCOME_FILE, read_outcome
from pipeline.search.space import Trial
from pipeline.storage import WorkStore
from pipeline.workdir import STUDENT_DIR

GPU_WAIT_S = 600.0  # how long a timing waits for a free GPU of the cluster (`SearchLatency._p50_on_gpu_node`)
SEARCH_WINDOW_S = 0.5  # seconds of timed passes per architecture, at least (the select stage times 2 s and more)


def architecture(folder: Path) -> str:
    """The export's architecture as the measure stage keys it (`architecture_key`: the compute
    fields of its config.json, eager, unbatched): equal for students that differ only in their
    weights, so the search and the select stage agree on which students one timing serves."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return architecture_key(config, EAGER, (0, 0))


def search_settings(settings: LatencyConfig, window_s: float = SEARCH_WINDOW_S) -> LatencyConfig:
    """The selection's latency settings cut to the search's short window: the search times many
    architectures while trials run, the select stage times the front alone and longer."""
    return settings.model_copy(update={"min_seconds": window_s, "min_runs": min(settings.min_runs, 5)})


class SearchLatency:
    """Milliseconds per forward pass of a configuration's student (p50 at the front shape)."""

    def __init__(self, store: WorkStore, trials_dir: str, settings: LatencyConfig, window_s: float = SEARCH_WINDOW_S,
                 runtimes: Sequence[str] = (EAGER,), on_gpu_node: bool | None = None) -> None:
        self.store, self.trials_dir, self.runtimes = store, trials_dir, tuple(runtimes)
        self.on_gpu_node = on_gpu_node  # None: decided at the first timing (`_on_gpu_node`)
        self.timed_on: set[str] = set()  # the Ray nodes that timed, when not this process
        self.settings = search_settings(settings, window_s)
        self.by_architecture: dict[str, float] = {}  # the fastest runtime's p50
        self.by_runtime: dict[tuple[str, str], float] = {}  # (architecture, runtime) → p50
        self.failures: dict[tuple[str, str], str] = {}  # a runtime that could not be built or run
        self.by_configuration: dict[str, float] = {}

    def __call__(self, trial: Trial) -> float:
        key = f"{self.trials_dir}/{trial.key}"
        self.store.fetch(f"{key}/{OUTCOME_FILE}", fresh=True)
        outcome: dict[str, Any] = read_outcome(self.store.path(key)) or {}
        student = outcome.get("student_path") or f"{key}/{STUDENT_DIR}"
        latency = self.of_folder(self.store.localize(student, fresh=True))
        self.by_configuration[trial.config_id] = latency
        return latency

    def of_folder(self, folder: Path) -> float:
        """A saved model's p50 in the fastest of `runtimes`, each timed once per architecture."""
        shape = architecture(folder)
        if shape not in self.by_architecture:
            for runtime in self.runtimes:
                try:
                    self.by_runtime[(shape, runtime)] = self._p50(folder, runtime)
                except Exception as e:  # noqa: BLE001 - another runtime may still time it; none: raised below
                    if runtime == EAGER or len(self.runtimes) == 1:
                        raise
                    self.failures[(shape, runtime)] = f"{type(e).__name__}: {e}"
            self.by_architecture[shape] = min(self.by_runtime[(shape, runtime)] for runtime in self.runtimes
                                              if (shape, runtime) in self.by_runtime)
        return self.by_architecture[shape]

    def _p50(self, folder: Path, runtime: str) -> float:
        if not self._on_gpu_node():
            return time_runtime(folder, runtime, self.settings)
        p50, node = self._p50_on_gpu_node(folder, runtime)
        self.timed_on.add(node)
        return p50

    def _on_gpu_node(self) -> bool:
        """cuda asked for and this process (the sweep's driver, often a cluster's CPU-only head)
        sees no CUDA device: the timing runs as a Ray task holding one GPU of the type asked."""
        if self.on_gpu_node is None:
            import torch

            self.on_gpu_node = self.settings.device == "cuda" and not torch.cuda.is_available()
        return self.on_gpu_node

    def _p50_on_gpu_node(self, folder: Path, runtime: str) -> tuple[float, str]:
        """One runtime's p50 timed by a Ray task with one GPU (of `selection.latency.accelerator_type`
        when given), reading the export through the work location (`WorkStore.localize`). It runs
        when a configuration is told, after its trial's workers gave their GPUs back; a cluster
        whose every GPU stays held by other work for GPU_WAIT_S makes this configuration's latency
        unknown (it is told failed) rather than stall the search."""
        import ray

        task = ray.remote(time_runtime_at).options(
            num_cpus=1, num_gpus=1, max_retries=0,
            **({"accelerator_type": self.settings.accelerator_type} if self.settings.accelerator_type else {}))
        ref = task.remote(self.store.location, self.store.address(folder), runtime, self.settings.model_dump())
        try:
            found: tuple[float, str] = ray.get(ref, timeout=GPU_WAIT_S)
            return found
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            raise TimeoutError(f"no GPU was free within {GPU_WAIT_S:.0f} s to time {folder.name} in {runtime}") from None


def time_runtime(folder: Path, runtime: str, settings: LatencyConfig) -> float:
    """One runtime's p50, built and run as the select stage's variants job does
    (`build_variant`, `load_runner`: the same input and output copies in every runtime, so
    the fastest is picked on equal terms); an ONNX file lives in scratch only while timed."""
    import torch

    from pipeline.measure.engines import build_variant, load_runner
    from pipeline.measure.job import latency_inputs

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    inputs = latency_inputs(config, settings.batch_size, settings.seq_length)
    sync = torch.cuda.synchronize if settings.device == "cuda" else None
    with tempfile.TemporaryDirectory(prefix="drydock-search-latency-") as scratch:
        variant = build_variant(folder, runtime, Path(scratch), seq_length_hint=settings.seq_length)
        runner = load_runner(variant, settings.threads or torch.get_num_threads(), settings.device)
        times = time_alone(partial(runner, inputs), settings, sync, f"{folder.name}/{runtime}")
    return float(np.median(times))


def time_runtime_at(location: str, address: str, runtime: str, settings: dict[str, Any]) -> tuple[float, str]:
    """`time_runtime` as a Ray task on another node: the export fetched into that node's mirror
    of the work location; returns the p50 and the node's id."""
    import ray

    folder = WorkStore.open(location).localize(address)
    return time_runtime(folder, runtime, LatencyConfig(**settings)), ray.get_runtime_context().get_node_id()
