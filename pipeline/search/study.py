"""The Optuna study a searching algorithm (`search.algorithm` other than `grid`) asks and tells.

The study is a journal file in the run's folder (`STUDY_FILE`): every ask and tell is appended as
it happens, so a driver killed mid-search leaves a study that `--resume` opens again, and the work
location holds it (the searcher publishes it after each ask and tell: `pipeline.search.journal_push`).
Which sampler serves which algorithm, and with which settings, is said here and nowhere else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from pipeline.config import SweepSpec

DIRECTIONS = {"metric": optuna.study.StudyDirection.MAXIMIZE, "latency": optuna.study.StudyDirection.MINIMIZE}


def sampler(algorithm: str, seed: int, budget: int) -> optuna.samplers.BaseSampler:
    """The algorithm's sampler. TPE and its multi-objective form (MOTPE) sample the first
    configurations at random, then model good and bad ones per parameter group: `group=True`
    because the space is conditional (each method's parameters exist only with it), and the
    constant liar makes concurrent asks spread out instead of repeating the same guess. NSGA-II
    evolves generations; its default 50 per generation would leave a budget of 40 all random, so a
    generation is a quarter of the budget (4 to 50). It breeds only the parameters every trial
    has, in a joint space the method alone, and draws the rest at random; its default mutation
    probability, 1 / (parameters bred) = 1, mutated the method away too, which made it `random`
    (tests/unit/search/test_study.py), so a child keeps its parents' method 9 times in 10."""
    if algorithm == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if algorithm in ("tpe", "motpe"):
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True,
                                          n_startup_trials=min(10, max(2, budget // 4)))
    if algorithm == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=min(50, max(4, budget // 4)), mutation_prob=0.1)
    raise ValueError(f"search.algorithm: {algorithm} asks no study")


def open_study(spec: SweepSpec, path: Path, objectives: Sequence[str]) -> optuna.Study:
    """The sweep's study at `path`, new or as a killed run left it. Reopened, the sampler is
    seeded past the trials already asked, so it does not replay the draws it made before."""
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(path)))
    asked = sum(len(storage.get_all_trials(s._study_id)) for s in storage.get_all_studies())
    search = spec.search
    return optuna.create_study(
        storage=storage, study_name=spec.name, load_if_exists=True,
        sampler=sampler(search.algorithm, search.sample_seed + asked, search.num_configurations or 1),
        directions=[DIRECTIONS[o] for o in objectives],
    )


def study_trial(study: optuna.Study, number: int) -> optuna.Trial:
    """The live trial `number` of the study (one asked earlier, maybe by a driver since killed)."""
    trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    return optuna.Trial(study, trial_id)


def known(study: optuna.Study, number: int) -> bool:
    """The study holds trial `number` (a journal older than the searcher's records would not)."""
    return number < len(study.get_trials(deepcopy=False))


def tell_values(study: optuna.Study, number: int, values: Sequence[float]) -> None:
    if known(study, number):
        study.tell(number, list(values), skip_if_finished=True)


def tell_pruned(study: optuna.Study, number: int, last: float | None, step: int) -> None:
    """A configuration ASHA stopped: pruned, with the last value its seeds reported where the
    study can use one (TPE ranks pruned trials by it). A multi-objective study takes no
    intermediate values: MOTPE counts a pruned trial among the bad ones, NSGA-II leaves it out."""
    if not known(study, number) or study.get_trials(deepcopy=False)[number].state != TrialState.RUNNING:
        return
    if last is not None and math.isfinite(last) and len(study.directions) == 1:
        study_trial(study, number).report(last, step)
    study.tell(number, state=TrialState.PRUNED)


def tell_failed(study: optuna.Study, number: int) -> None:
    if known(study, number):
        study.tell(number, state=TrialState.FAIL, skip_if_finished=True)


def quiet_experimental_warnings() -> None:
    """Optuna logs every trial it is told, and warns once per process that multivariate/group TPE
    are experimental (docs/search.md says so): the sweep's own lines say what happened."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
