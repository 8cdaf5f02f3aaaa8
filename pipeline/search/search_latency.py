"""The student's latency as the search sees it: the second objective of a multi-objective study,
known when a configuration is told, long before the select stage times the front interleaved.

Each configuration is timed from its first seed's export, loaded as a consumer loads it, at the
selection's front shape on its device, by the measure stage's engine (`measure_folder`: warm-up,
then timed passes until the median is stable) over a short window. Students of one architecture
take the same time whatever their weights, so the figure is cached per architecture (the shape
fields of the export's config.json): a dense student of a depth already timed costs nothing, and
a pruned CoFi student, whose shape its training decided, is timed once its export exists. The
select stage still re-measures the front, interleaved with the teacher, in every runtime of
`selection.runtimes`: these figures only steer the search (timed beside running trials, they are
noisier than the select stage's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.config import LatencyConfig
from pipeline.measure.interleaved import architecture_key
from pipeline.measure.latency import measure_folder
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

    def __init__(self, store: WorkStore, trials_dir: str, settings: LatencyConfig, window_s: float = SEARCH_WINDOW_S) -> None:
        self.store, self.trials_dir = store, trials_dir
        self.settings = settings.model_copy(update={"min_seconds": window_s, "min_runs": min(settings.min_runs, 5)})
        self.by_architecture: dict[str, float] = {}
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
        """A saved model's p50, timed once per architecture."""
        shape = architecture(folder)
        if shape not in self.by_architecture:
            self.by_architecture[shape] = measure_folder(folder, self.settings).p50_ms
        return self.by_architecture[shape]
