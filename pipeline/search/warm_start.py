"""`search.warm_start`: a previous sweep's finished configurations seed a new study, so a scheduled
retrain of the same task and teacher does not spend its first trials relearning what the last
sweep found.

Each complete trial of the previous sweep's study journals (`runs/*/study.journal`, read only) is
added to the new study as a finished trial, with the distributions of *this* spec's joint space:
a configuration whose method this spec no longer runs, whose searched parameters differ, or whose
values fall outside this spec's domains is left out, as is one told with other objectives (a
single-objective study's trials cannot seed a metric-and-latency one; the other way round, the
metric is kept). Its values are the previous sweep's: the data or the teacher may have changed
since, which is what a retrain is for, and the new sweep's own configurations soon outweigh them.
A warm-started configuration the study suggests again is told its known values and not run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from pipeline.config import SweepSpec
from pipeline.search.joint_space import METHOD, distributions
from pipeline.workdir import RUNS_DIR, STUDY_FILE

WARM_START = "warm_start"  # the user attribute naming the sweep a seeded trial came from


def previous_trials(folder: Path) -> Iterator[FrozenTrial]:
    """Every complete trial of the studies a previous sweep's runs left (oldest run first)."""
    for journal in sorted(folder.glob(f"{RUNS_DIR}/*/{STUDY_FILE}")):
        storage = JournalStorage(JournalFileBackend(str(journal)))
        for study in storage.get_all_studies():
            yield from storage.get_all_trials(study._study_id, deepcopy=False, states=(TrialState.COMPLETE,))


def _inside(dist: BaseDistribution, value: Any) -> bool:
    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    low, high = getattr(dist, "low", None), getattr(dist, "high", None)
    return isinstance(value, int | float) and low is not None and high is not None and low <= value <= high


def _seed(trial: FrozenTrial, spec: SweepSpec, objectives: Sequence[str]) -> optuna.trial.FrozenTrial | None:
    method = trial.params.get(METHOD)
    if method not in spec.methods or trial.values is None:
        return None
    dists = distributions(spec, str(method))
    if set(trial.params) != set(dists) or not all(_inside(dists[k], v) for k, v in trial.params.items()):
        return None
    values = list(trial.values)
    if len(values) != len(objectives):
        if len(objectives) != 1:
            return None
        values = values[:1]  # the metric: a study's first objective (`pipeline.search.study`)
    return optuna.trial.create_trial(params=dict(trial.params), distributions=dists, values=values,
                                     user_attrs={**trial.user_attrs, WARM_START: True})


def warm_start(study: optuna.Study, spec: SweepSpec, objectives: Sequence[str]) -> dict[str, list[float]]:
    """Seed a new `study` from `search.warm_start`; returns config_id → values of what was added."""
    folder = spec.search.warm_start
    if folder is None or study.get_trials(deepcopy=False):
        return {}  # a resumed study was seeded when it was new
    known: dict[str, list[float]] = {}
    for trial in previous_trials(Path(folder).expanduser()):
        seeded = _seed(trial, spec, objectives)
        cid = trial.user_attrs.get("config_id")
        if seeded is None or not cid or cid in known:
            continue
        study.add_trial(seeded)
        known[cid] = list(seeded.values)
    return known
