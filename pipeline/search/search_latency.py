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
noisier than the select stage's).
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

SEARCH_WINDOW_S = 0.5  # seconds of timed passes per architecture, at least (the select stage times 2 s and more)


def architecture(folder: Path) -> str:
    """The export's architecture as the measure stage keys it (`architecture_key`: the compute
    fields of its config.json, eager, unbatched): equal for students that differ only in their
    weights, so the search and the select stage agree on which students one timing serves."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return architecture_key(config, EAGER, (0, 0))


class SearchLatency:
    """Milliseconds per forward pass of a configuration's student (p50 at the front shape)."""

    def __init__(self, store: WorkStore, trials_dir: str, settings: LatencyConfig, window_s: float = SEARCH_WINDOW_S,
                 runtimes: Sequence[str] = (EAGER,)) -> None:
        self.store, self.trials_dir, self.runtimes = store, trials_dir, tuple(runtimes)
        self.settings = settings.model_copy(update={"min_seconds": window_s, "min_runs": min(settings.min_runs, 5)})
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
        """One runtime's p50, built and run as the select stage's variants job does
        (`build_variant`, `load_runner`: the same input and output copies in every runtime, so
        the fastest is picked on equal terms); an ONNX file lives in scratch only while timed."""
        import torch

        from pipeline.measure.engines import build_variant, load_runner
        from pipeline.measure.job import latency_inputs

        settings = self.settings
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        inputs = latency_inputs(config, settings.batch_size, settings.seq_length)
        sync = torch.cuda.synchronize if settings.device == "cuda" else None
        with tempfile.TemporaryDirectory(prefix="drydock-search-latency-") as scratch:
            variant = build_variant(folder, runtime, Path(scratch), seq_length_hint=settings.seq_length)
            runner = load_runner(variant, settings.threads or torch.get_num_threads(), settings.device)
            times = time_alone(partial(runner, inputs), settings, sync, f"{folder.name}/{runtime}")
        return float(np.median(times))
