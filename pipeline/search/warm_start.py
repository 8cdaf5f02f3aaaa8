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
A warm-started configuration the study suggests again runs like any other (a retrain is for the
new data or teacher: the previous best is trained again when the sampler still favours it) and
counts in the budget. NSGA-II builds its generations from its own trials only, so a warm start
informs TPE and MOTPE.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from pipeline.config import SweepSpec
from pipeline.errors import SpecError
from pipeline.search.joint_space import METHOD, distributions, suggest_configuration
from pipeline.search.space import config_id
from pipeline.workdir import RUNS_DIR, STUDY_FILE

logger = logging.getLogger(__name__)
WARM_START = "warm_start"  # the user attribute naming the sweep a seeded trial came from


def previous_trials(folder: Path) -> Iterator[FrozenTrial]:
    """Every complete trial of the studies a previous sweep's runs left (newest run first)."""
    for journal in sorted(folder.glob(f"{RUNS_DIR}/*/{STUDY_FILE}"), reverse=True):  # the newest run's values win
        storage = JournalStorage(JournalFileBackend(str(journal)))
        for study in storage.get_all_studies():
            yield from storage.get_all_trials(study._study_id, deepcopy=False, states=(TrialState.COMPLETE,))


def _inside(dist: BaseDistribution, value: Any) -> bool:
    """`value` is one this spec's distribution can give (an integer domain takes whole numbers only)."""
    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (TypeError, ValueError):
        return False


def _seed(trial: FrozenTrial, spec: SweepSpec, objectives: Sequence[str]) -> tuple[str, FrozenTrial] | None:
    """The trial as this spec's study holds it, with its configuration's id under this spec (its
    fixed values may have changed since), or None when this spec cannot hold it."""
    method = trial.params.get(METHOD)
    if method not in spec.methods or trial.values is None:
        return None
    dists = distributions(spec, str(method))
    if set(trial.params) != set(dists) or not all(_inside(dists[k], v) for k, v in trial.params.items()):
        return None
    try:
        _, params = suggest_configuration(optuna.trial.FixedTrial(dict(trial.params)), spec)
    except (SpecError, ValueError):
        return None
    values = list(trial.values)
    if len(values) != len(objectives):
        if len(objectives) != 1:
            return None
        values = values[:1]  # the metric: a study's first objective (`pipeline.search.study`)
    cid = config_id(str(method), params)
    return cid, optuna.trial.create_trial(params=dict(trial.params), distributions=dists, values=values,
                                          user_attrs={**trial.user_attrs, "config_id": cid, WARM_START: True})


def warm_start(study: optuna.Study, spec: SweepSpec, objectives: Sequence[str]) -> dict[str, list[float]]:
    """Seed a new `study` from `search.warm_start`; returns config_id → values of what was added."""
    folder = spec.search.warm_start
    if folder is None or study.get_trials(deepcopy=False):
        return {}  # a resumed study was seeded when it was new
    known: dict[str, list[float]] = {}
    for trial in previous_trials(Path(folder).expanduser()):
        found = _seed(trial, spec, objectives)
        if found is None or found[0] in known:
            continue
        cid, seeded = found
        try:
            study.add_trial(seeded)
        except (ValueError, TypeError) as e:  # a trial Optuna refuses is left out, not a failed sweep
            logger.warning("search.warm_start: configuration %s of %s left out: %s", cid, folder, e)
            continue
        known[cid] = list(seeded.values)
    return known
