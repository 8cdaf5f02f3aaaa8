"""The spec's methods as one space an Optuna study searches: the method is a choice, and each
method's parameters are suggested only once it is chosen (define-by-run), so a study over four
methods learns each method's parameters from that method's configurations alone.

Every parameter keeps the domain the spec gave it: `grid` and `choice` are categorical (a grid's
values have no order the searcher could exploit any more than a choice's), `uniform` and
`loguniform` are floats, `randint` is `[low, high)` like its draw in `pipeline.search.space`. The
suggested values are validated by the method's own `Params`, once, as `space.method_configurations`
validates a drawn configuration; the configuration id is `space.config_id`'s, so a configuration a
study suggests and the same one a grid draws are one configuration.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from pipeline.config import Choice, Domain, Grid, LogUniform, RandInt, SweepSpec, Uniform
from pipeline.search.space import validated_params

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

    from methods.declaration import MethodParams

METHOD = "method"  # the study's parameter that chooses the method
_PLAIN = (type(None), bool, int, float, str)  # what Optuna accepts as a categorical value


def param_name(method: str, name: str) -> str:
    """The study's name of a method's parameter: `<method>.<parameter>`, so two methods' `num_layers`
    are two parameters (their best values differ)."""
    return f"{method}.{name}"


def _categorical(values: list[Any]) -> list[Any]:
    """Optuna's categorical values must be plain scalars: a list (Theseus `layers`) travels as JSON text."""
    return [v if isinstance(v, _PLAIN) else json.dumps(v) for v in values]


def _from_categorical(value: Any, values: list[Any]) -> Any:
    return values[_categorical(values).index(value)]


def suggest_value(trial: optuna.trial.BaseTrial, name: str, domain: Domain) -> Any:
    """One parameter's value from the study, in the spec's domain."""
    if isinstance(domain, Grid | Choice):
        values = list(domain.argument)
        return _from_categorical(trial.suggest_categorical(name, _categorical(values)), values)
    if isinstance(domain, RandInt):
        return trial.suggest_int(name, int(domain.low), int(domain.high) - 1)
    if isinstance(domain, LogUniform):
        return trial.suggest_float(name, float(domain.low), float(domain.high), log=True)
    if isinstance(domain, Uniform):
        return trial.suggest_float(name, float(domain.low), float(domain.high))
    raise TypeError(f"{name}: no study distribution for the domain {domain!r}")


def distribution(domain: Domain) -> BaseDistribution:
    """The study's distribution of a domain: what `suggest_value` asks for it."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(domain, Grid | Choice):
        return CategoricalDistribution(_categorical(list(domain.argument)))
    if isinstance(domain, RandInt):
        return IntDistribution(int(domain.low), int(domain.high) - 1)
    if isinstance(domain, LogUniform):
        return FloatDistribution(float(domain.low), float(domain.high), log=True)
    if isinstance(domain, Uniform):
        return FloatDistribution(float(domain.low), float(domain.high))
    raise TypeError(f"no study distribution for the domain {domain!r}")


def distributions(spec: SweepSpec, method: str) -> dict[str, BaseDistribution]:
    """The distributions of one method's study trials in this spec's joint space."""
    from optuna.distributions import CategoricalDistribution

    space = spec.methods[method].domains()
    return {METHOD: CategoricalDistribution(list(spec.methods)),
            **{param_name(method, name): distribution(domain) for name, domain in space.items()}}


def suggest_configuration(trial: optuna.trial.BaseTrial, spec: SweepSpec) -> tuple[str, MethodParams]:
    """The method and its parameters (validated into its `Params`) for one study trial."""
    method = str(trial.suggest_categorical(METHOD, list(spec.methods)))
    space = spec.methods[method]
    suggested = {name: suggest_value(trial, param_name(method, name), domain) for name, domain in space.domains().items()}
    model = cast("type[MethodParams]", space.params_model)
    return method, validated_params(method, model, {**space.fixed(), **suggested}, suggested)
