"""The methods' parameter spaces: each method's parameters as a spec gives them, each a value or
a search domain (`pipeline.config.domains`) that the method's own `Params` accepts, derived from
those `Params` (built-in and third-party methods alike) so a method writes no second model.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    create_model,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pipeline.config.domains import Domain, as_domain, is_domain
from pipeline.config.messages import did_you_mean, param_error


def default_params(params: ParamSpace | dict[str, Any]) -> dict[str, Any]:
    """Fixed values only: a searched parameter falls back to the method's default.

    This is what `drydock train` runs when no `--set methods.<m>.<p>=<v>` pins a domain.
    """
    given = params.given() if isinstance(params, ParamSpace) else params
    return {k: v for k, v in given.items() if not (is_domain(v) or isinstance(v, Domain))}


# the type of the pydantic error a parameter space raises: its `lines` are the problems, each the
# text after `methods.<name>.<param>: ` (or `methods.<name>: ` for the parameters together)
PARAM_PROBLEMS = "drydock_param_problems"
# the same for the spec's whole `methods:` section, each line a whole `methods.…: …` problem
METHOD_PROBLEMS = "drydock_method_problems"


def _problems(kind: str, lines: list[str]) -> PydanticCustomError:
    return PydanticCustomError(kind, "{lines}", {"lines": lines})


class ParamSpace(BaseModel):
    """A method's parameters as the spec gives them: each a value or a search domain.

    `param_space_model` derives one per method from its `Params`, so a third-party method gets it
    without writing it. A fixed value is checked against the parameter's type and kept as written
    (the spec's dump shows what the user wrote, and the trials' configurations are validated once,
    by `Params`, where `pipeline.search.space` draws them); a domain is typed and every value it
    can give is checked. Parameters left out are the method's defaults and are never read here."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    params_model: ClassVar[type[BaseModel]] = BaseModel
    _order: tuple[str, ...] = PrivateAttr(default=())  # the parameters given, in the spec's order

    @model_validator(mode="wrap")
    @classmethod
    def _in_written_order(cls, data: Any, handler: Any) -> Any:
        """The spec's order is the draw order of the random domains and the grids' nesting: it
        decides which configurations a sweep (and a resumed one) draws."""
        space = handler(data)
        if isinstance(data, dict):
            space._order = tuple(data)
        return space

    @model_validator(mode="after")
    def _together(self) -> Self:
        """Cross-field checks of the method (a sum that must not exceed 1, two ways to give one
        setting), run when every parameter passed alone."""
        lines = _combination_problems(self.params_model, self)
        if lines:
            raise _problems(PARAM_PROBLEMS, lines)
        return self

    @model_serializer
    def _as_written(self) -> dict[str, Any]:
        return self.given()

    def given(self) -> dict[str, Any]:
        """The parameters the spec gives, values and domains, in its order."""
        return {name: getattr(self, name) for name in self._order}

    def fixed(self) -> dict[str, Any]:
        """The parameters given a value: what `drydock train` runs beside the method's defaults."""
        return {name: v for name, v in self.given().items() if not isinstance(v, Domain)}

    def domains(self) -> dict[str, Domain]:
        return {name: v for name, v in self.given().items() if isinstance(v, Domain)}

    def __getitem__(self, name: str) -> Any:
        return self.given()[name]

    def __repr_args__(self) -> Any:
        return self.given().items()

    def __reduce__(self) -> tuple[Any, ...]:
        # the class is derived at run time, so it pickles as the method's Params it is derived from
        return (space_from_state, (self.params_model, self.__getstate__()))


def space_from_state(params_model: type[BaseModel], state: dict[str, Any]) -> ParamSpace:
    """A pickled parameter space: its class is derived at run time, so no pickle can name it; the
    method's Params it is derived from can."""
    space_cls = param_space_model(params_model)
    space = space_cls.__new__(space_cls)
    space.__setstate__(state)
    return space


@functools.cache
def param_space_model(params_model: type[BaseModel]) -> type[ParamSpace]:
    """The value-or-domain model of a method's `Params`: one field per parameter, each taking a
    value of the parameter's type or a search domain over it."""

    def check(value: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None
        return _value_or_domain(params_model, info.field_name, value)

    # `T | Domain` says what a field holds; the check is the method's own (`_value_or_domain`)
    fields: dict[str, Any] = {name: (Annotated[field.annotation | Domain, PlainValidator(check)], None)
                               for name, field in params_model.model_fields.items()}
    space: type[ParamSpace] = create_model(f"{params_model.__name__}Space", __base__=ParamSpace,
                                           __module__=ParamSpace.__module__, **fields)
    space.params_model = params_model
    return space


def _value_or_domain(model: type[BaseModel], pname: str, value: Any) -> Any:
    """`value` as the spec wrote it, or its typed domain, once every value it may give passes
    the method's own check of `pname`; else a PARAM_PROBLEMS error listing what fails."""
    domain = None
    if is_domain(value) or isinstance(value, Domain):
        try:
            domain = as_domain(value)
        except ValidationError as e:
            raise _problems(PARAM_PROBLEMS, [param_error(err) for err in e.errors()]) from None
    candidates = domain.candidates() if domain is not None else [value]
    infinite = [cand for cand in candidates if _not_finite(cand)]
    if infinite:  # a method's own Params may not say so: `temperature: .inf` is > 0
        raise _problems(PARAM_PROBLEMS, [f"must be a finite number (got {infinite[0]!r})"])
    found = [msg for cand in candidates for _, msg in _field_errors(model, pname, cand)]
    if found:
        raise _problems(PARAM_PROBLEMS, found)
    draw = domain.typical_draw() if domain is not None else None
    errors = [] if draw is None else _field_errors(model, pname, draw)
    kind = domain.kind if domain is not None else None
    if any(etype == "int_from_float" for etype, _ in errors):
        raise _problems(PARAM_PROBLEMS, [f"{kind} draws floats but {pname} takes integers; use randint or grid"])
    if errors:
        reason = "; ".join(msg for _, msg in errors)
        raise _problems(PARAM_PROBLEMS, [f"{kind} draws values inside the range that {pname} rejects: {reason}"])
    return domain if domain is not None else value


def _not_finite(value: Any) -> bool:
    """An infinite or NaN float anywhere in a parameter's value (a list of them included)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, (list, dict)) and any(_not_finite(v) for v in (value.values() if isinstance(value, dict) else value))


def _field_errors(model: type[BaseModel], pname: str, value: Any) -> list[tuple[str, str]]:
    """(type, message) of each error the method's Params model gives for `pname = value` alone.

    Errors on other fields come from cross-field checks that need the rest, so they are left out.
    """
    try:
        model.model_validate({pname: value})
    except ValidationError as e:
        return [
            (err["type"], param_error(err))
            for err in e.errors()
            if tuple(err["loc"][:1]) == (pname,)
        ]
    return []


MAX_COMBINATIONS_CHECKED = 10_000


def _combination_problems(model: type[BaseModel], space: ParamSpace) -> list[str]:
    """Cross-field checks (a sum that must not exceed 1, two ways to give one setting): the
    parameters together, for every grid and choice value and each bound of every range.

    Checking each parameter alone misses these, and the sweep would then stop at the first bad
    combination. The constraints compare or add parameters, so a range that passes at its
    bounds passes inside them; `expand_trials` still reports a draw that fails as a SpecError.
    """
    given = space.given()
    values = {k: v.candidates() if isinstance(v, Domain) else [v] for k, v in given.items()}
    searched = list(space.domains())
    found: dict[str, str] = {}
    combos = itertools.islice(itertools.product(*values.values()), MAX_COMBINATIONS_CHECKED)
    for combo in combos:
        point = dict(zip(values, combo))
        try:
            model.model_validate(point)
        except ValidationError as e:
            with_ = ", ".join(f"{k}={point[k]!r}" for k in searched)
            for err in e.errors():
                msg = param_error(err)
                found.setdefault(msg, f"{msg} (with {with_})" if with_ else msg)
    return list(found.values())


def method_spaces(raw: dict[Any, Any]) -> dict[str, ParamSpace]:
    """The spec's `methods:` section typed: each method registered, each of its parameters a
    value or a domain its `Params` accepts. Raises a METHOD_PROBLEMS error listing every problem."""
    from methods import get_declaration, registered_methods

    known = registered_methods()
    spaces: dict[str, ParamSpace] = {}
    lines: list[str] = []
    for name, params in raw.items():
        if name not in known:
            lines.append(f"methods.{name}: unknown method (registered: {', '.join(sorted(known))}){did_you_mean(name, known)}")
            continue
        model = param_space_model(get_declaration(name).Params)
        if isinstance(params, model):
            spaces[name] = params
            continue
        if not isinstance(params, dict | None):
            lines.append(f"methods.{name}: expected a mapping of parameters")
            continue
        try:
            spaces[name] = model.model_validate(params or {})
        except ValidationError as e:
            lines += _space_lines(name, model, list(params or {}), e)
    if lines:
        raise _problems(METHOD_PROBLEMS, lines)
    return spaces


def _space_lines(method: str, model: type[ParamSpace], order: list[str], error: ValidationError) -> list[str]:
    """A parameter space's errors as the spec's problems, in the order the spec gives them."""
    fields = model.model_fields
    found: list[tuple[int, str]] = []
    for err in error.errors():
        pname = str(err["loc"][0]) if err["loc"] else None
        where = f"methods.{method}.{pname}" if pname is not None else f"methods.{method}"
        rank = order.index(pname) if pname in order else len(order)
        if err["type"] == "extra_forbidden":
            found.append((rank, f"{where}: unknown parameter (known: {', '.join(fields) or 'none'}){did_you_mean(str(pname), fields)}"))
        elif err["type"] == PARAM_PROBLEMS:
            found += [(rank, f"{where}: {line}") for line in err["ctx"]["lines"]]
        else:
            found.append((rank, f"{where}: {param_error(err)}"))
    return [line for _, line in sorted(found, key=lambda item: item[0])]

