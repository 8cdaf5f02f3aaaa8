"""The spec's methods as one define-by-run space: the method first, its own parameters after."""

from __future__ import annotations

import optuna

from pipeline.config import spec_from_dict
from pipeline.search.joint_space import param_name, suggest_configuration
from pipeline.search.space import config_id, expand_trials

BASE = {
    "name": "j",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
}


def _spec(methods: dict, algorithm: str = "random", budget: int = 10):
    return spec_from_dict({**BASE, "methods": methods, "search": {"algorithm": algorithm, "num_configurations": budget}})


def test_each_method_gets_only_its_own_parameters_each_in_its_domain():
    spec = _spec({"kd": {"num_layers": {"randint": [1, 4]}, "alpha": {"uniform": [0.2, 0.8]}, "temperature": 3.0},
                  "theseus": {"base_rate": {"loguniform": [0.1, 0.9]}, "layers": {"choice": [[0, 2], [1, 3]]}}})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        method, params = suggest_configuration(trial, spec)
        seen.add(method)
        names = set(trial.params) - {"method"}
        assert names == {param_name(method, p) for p in spec.methods[method].domains()}
        if method == "kd":
            assert params.num_layers in (1, 2, 3) and 0.2 <= params.alpha <= 0.8 and params.temperature == 3.0
        else:
            assert 0.1 <= params.base_rate <= 0.9 and params.layers in ([0, 2], [1, 3])  # a list survives as JSON text
        study.tell(trial, 0.0)
    assert seen == {"kd", "theseus"}


def test_a_configuration_the_study_suggests_has_the_id_the_grid_gives_it():
    spec = _spec({"kd": {"alpha": {"grid": [0.5]}, "num_layers": {"choice": [2]}}}, budget=1)
    method, params = suggest_configuration(optuna.create_study().ask(), spec)
    grid = expand_trials(spec_from_dict({**BASE, "methods": {"kd": {"alpha": {"grid": [0.5]}, "num_layers": 2}}}))
    assert config_id(method, params) == grid[0].config_id
