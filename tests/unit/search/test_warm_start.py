"""search.warm_start: a previous sweep's finished configurations seed a new study."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from pipeline.config import spec_from_dict
from pipeline.search.joint_space import distributions, suggest_configuration
from pipeline.search.searcher import ConfigurationSearcher
from pipeline.search.warm_start import WARM_START

METRIC = "eval/accuracy"
METHODS = {"kd": {"num_layers": {"randint": [1, 4]}, "alpha": {"uniform": [0.1, 0.9]}},
           "theseus": {"num_layers": {"choice": [2, 3]}}}


def _spec(algorithm="motpe", methods=None, **search):
    return spec_from_dict({
        "name": "w", "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
        "teacher": {"model": "bert-base-uncased"}, "seeds": [0], "methods": methods or METHODS,
        "search": {"algorithm": algorithm, "num_configurations": 4, **search},
    })


def _previous_sweep(tmp_path, n: int = 4):
    """A sweep folder whose run's study told `n` configurations, as a searching sweep leaves it."""
    folder = tmp_path / "prev"
    s = ConfigurationSearcher(_spec(), METRIC, str(folder / "runs/r1/study.journal"), latency=lambda t: 2.0 + t.order)
    for i in range(n):
        s.suggest(f"t{i}")
        s.on_trial_complete(f"t{i}", {"drydock_final": 1.0, METRIC: 0.5 + i / 10})
    return folder, {c.trial.config_id: (c.trial.method, c.trial.params) for c in s.configs.values()}


def _study(searcher):
    return searcher.study


def test_a_warm_started_study_holds_the_previous_sweeps_configurations_once(tmp_path):
    folder, previous = _previous_sweep(tmp_path)
    s = ConfigurationSearcher(_spec(warm_start=str(folder)), METRIC, str(tmp_path / "new/study.journal"), latency=lambda t: 1.0)
    seeded = [t for t in _study(s).trials if t.user_attrs.get(WARM_START)]
    assert {t.user_attrs["config_id"] for t in seeded} == set(previous)
    assert all(t.state == TrialState.COMPLETE and len(t.values) == 2 for t in seeded)
    handed = [s.suggest(f"n{i}") for i in range(4)]
    assert len({h["trial"].config_id for h in handed}) == 4 and len(s.configs) == 4  # the budget counts what runs
    again = ConfigurationSearcher(_spec(warm_start=str(folder)), METRIC, str(tmp_path / "new/study.journal"))
    assert len(_study(again).trials) == len(_study(s).trials)  # reopened (a resume): not seeded twice


def test_configurations_outside_this_specs_space_or_objectives_are_left_out(tmp_path):
    folder, previous = _previous_sweep(tmp_path, n=6)
    narrower = {"kd": {"num_layers": {"randint": [1, 3]}, "alpha": {"uniform": [0.1, 0.9]}}}
    s = ConfigurationSearcher(_spec(methods=narrower, warm_start=str(folder)), METRIC, str(tmp_path / "a.journal"))
    kept = {t.user_attrs["config_id"] for t in _study(s).trials}
    expected = {cid for cid, (method, params) in previous.items() if method == "kd" and params.num_layers < 3}
    assert kept == expected
    single = ConfigurationSearcher(_spec("tpe", warm_start=str(folder)), METRIC, str(tmp_path / "b.journal"))
    assert all(len(t.values) == 1 for t in _study(single).trials) and len(_study(single).trials) == len(previous)


def test_the_distributions_a_warm_start_adds_with_are_the_ones_a_suggestion_records():
    spec = _spec()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(10):
        trial = study.ask()
        method, _ = suggest_configuration(trial, spec)
        assert study._storage.get_trial(trial._trial_id).distributions == distributions(spec, method)
        study.tell(trial, 0.0)


@pytest.mark.parametrize("search,expected", [
    ({"algorithm": "grid", "num_configurations": None, "warm_start": "/nowhere"},
     "search.warm_start: seeds a searching algorithm's study; the grid runs its fixed list"),
])
def test_warm_start_with_the_grid_is_refused(search, expected):
    from pipeline.errors import SpecError

    raw = _spec().model_dump(mode="json")
    raw["search"] = {**raw["search"], **search}
    with pytest.raises(SpecError) as info:
        spec_from_dict(raw)
    assert info.value.problems == [expected]


def test_a_warm_start_folder_without_a_study_is_named_before_any_work(tmp_path):
    from pipeline.config import check_for_sweep
    from pipeline.errors import SpecError

    (tmp_path / "grid-sweep" / "runs" / "r1").mkdir(parents=True)
    for folder, problem in ((tmp_path / "missing", "is not a folder"), (tmp_path / "grid-sweep", "holds no study")):
        with pytest.raises(SpecError) as info:
            check_for_sweep(_spec(warm_start=str(folder)))
        assert any(line.startswith("search.warm_start: ") and problem in line for line in info.value.problems)


def test_a_configuration_whose_fixed_values_changed_gets_its_id_under_the_new_spec(tmp_path):
    folder, previous = _previous_sweep(tmp_path)
    changed = {**METHODS, "kd": {**METHODS["kd"], "temperature": 4.0}}  # a fixed value the old ids did not include
    s = ConfigurationSearcher(_spec(methods=changed, warm_start=str(folder)), METRIC, str(tmp_path / "c.journal"))
    kd_ids = {t.user_attrs["config_id"] for t in _study(s).trials if t.params["method"] == "kd"}
    assert kd_ids and not kd_ids & set(previous)
