"""The study file: one sampler per algorithm, reopened where a killed run left it."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from pipeline.config import spec_from_dict
from pipeline.search import study as studies


def _spec(algorithm: str, budget: int = 40):
    return spec_from_dict({
        "name": "st", "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
        "teacher": {"model": "bert-base-uncased"}, "methods": {"kd": {"alpha": {"uniform": [0.1, 0.9]}}},
        "search": {"algorithm": algorithm, "num_configurations": budget},
    })


@pytest.mark.parametrize("algorithm,kind", [("random", "RandomSampler"), ("tpe", "TPESampler"), ("motpe", "TPESampler"),
                                            ("nsga2", "NSGAIISampler")])
def test_each_algorithm_has_its_sampler_and_nsga2_generations_fit_the_budget(algorithm, kind):
    sampler = studies.sampler(algorithm, seed=0, budget=40)
    assert type(sampler).__name__ == kind
    if algorithm == "nsga2":
        assert sampler._population_size == 10  # a quarter of 40: the default 50 would leave it all random
    if kind == "TPESampler":
        assert sampler._n_startup_trials == 10 and studies.sampler(algorithm, 0, 12)._n_startup_trials == 3


def test_a_reopened_study_keeps_its_trials_and_does_not_replay_its_first_draws(tmp_path):
    spec = _spec("random")
    first = studies.open_study(spec, tmp_path / "study.journal", ("metric", "latency"))
    draws = []
    for _ in range(3):
        trial = first.ask()
        draws.append(trial.suggest_float("kd.alpha", 0.1, 0.9))
    first.tell(0, [0.8, 3.0])
    again = studies.open_study(spec, tmp_path / "study.journal", ("metric", "latency"))
    assert [t.state for t in again.trials] == [TrialState.COMPLETE, TrialState.RUNNING, TrialState.RUNNING]
    assert again.trials[0].values == [0.8, 3.0]
    assert again.ask().suggest_float("kd.alpha", 0.1, 0.9) not in draws


def test_pruned_takes_the_last_value_in_one_objective_and_none_in_two(tmp_path):
    one = studies.open_study(_spec("tpe"), tmp_path / "one.journal", ("metric",))
    one.ask()
    studies.tell_pruned(one, 0, 0.6, step=3)
    two = studies.open_study(_spec("motpe"), tmp_path / "two.journal", ("metric", "latency"))
    two.ask()
    studies.tell_pruned(two, 0, 0.6, step=3)
    assert (one.trials[0].state, one.trials[0].intermediate_values) == (TrialState.PRUNED, {3: 0.6})
    assert (two.trials[0].state, two.trials[0].intermediate_values) == (TrialState.PRUNED, {})
    studies.tell_pruned(one, 0, 0.9, step=4)  # told already: nothing changes
    assert one.trials[0].intermediate_values == {3: 0.6}
    assert isinstance(one, optuna.Study)


def test_motpes_first_draws_of_sample_seed_0_are_the_ones_the_asha_sweep_test_relies_on(tmp_path):
    """tests/integration/search/test_search_study.py forces an ASHA stop by the order of MOTPE's
    random start: (2 layers, lr 1e-7) first, (2 layers, lr 1e-3) second. A change in Optuna's
    draws must fail here, by name, not as a flaky sweep."""
    from pipeline.search.joint_space import suggest_configuration

    spec = spec_from_dict({
        "name": "smoke-motpe", "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
        "teacher": {"model": "bert-base-uncased"}, "seeds": [0, 1],
        "methods": {"kd": {"init_from": "pretrained", "num_layers": {"randint": [1, 3]},
                           "learning_rate": {"choice": [1.0e-7, 1.0e-3]}}},
        "search": {"algorithm": "motpe", "num_configurations": 2, "sample_seed": 0},
    })
    study = studies.open_study(spec, tmp_path / "study.journal", ("metric", "latency"))
    draws = [suggest_configuration(study.ask(), spec)[1] for _ in range(2)]
    assert [(p.num_layers, p.learning_rate) for p in draws] == [(2, 1.0e-7), (2, 1.0e-3)]


def _methods_asked(algorithm: str, path) -> list[str]:
    """40 configurations of a two-method joint space, where every `finetune` dominates every `kd`."""
    from pipeline.search.joint_space import suggest_configuration

    spec = spec_from_dict({
        "name": "joint", "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
        "teacher": {"model": "bert-base-uncased"},
        "methods": {"finetune": {"learning_rate": {"loguniform": [1.0e-5, 1.0e-3]}},
                    "kd": {"alpha": {"uniform": [0.1, 0.9]}, "learning_rate": {"loguniform": [1.0e-5, 1.0e-3]}}},
        "search": {"algorithm": algorithm, "num_configurations": 40, "sample_seed": 3},
    })
    study = studies.open_study(spec, path, ("metric", "latency"))
    methods = []
    for number in range(40):
        method, params = suggest_configuration(study.ask(), spec)
        methods.append(method)
        good = method == "finetune"
        studies.tell_values(study, number, [0.9 if good else 0.6, (1.0 if good else 5.0) + params.learning_rate])
    return methods


def test_nsga2_breeds_the_method_of_a_conditional_space_instead_of_drawing_at_random(tmp_path):
    """Optuna's NSGA-II crosses over the parameters every trial has (here only the method) and
    draws the rest at random. At its default mutation probability, 1 / (parameters crossed) = 1,
    the method was always mutated away too, so every draw was its inner RandomSampler's, the
    same as `random`'s of the same seed. Bred, the dominant method fills the later generations."""
    nsga2 = _methods_asked("nsga2", tmp_path / "nsga2.journal")
    random = _methods_asked("random", tmp_path / "random.journal")
    assert nsga2[:10] == random[:10]  # the first generation (a quarter of 40) is random in both
    assert nsga2[20:].count("finetune") >= 16 > random[20:].count("finetune")
