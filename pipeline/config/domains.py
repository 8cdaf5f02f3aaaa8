"""The search domains a method parameter may be given as (`{grid: [...]}`, `{choice: [...]}`,
`{uniform: [low, high]}`, `{loguniform: [low, high]}`, `{randint: [low, high]}`): each checks its
own shape, says which values to validate it with, and draws its samples (`pipeline.search.space`).
"""

from __future__ import annotations

import math
import random
from typing import Any, ClassVar, TypeGuard

from pydantic import (
    BaseModel,
    ConfigDict,
    model_validator,
)


class Domain(BaseModel):
    """A method parameter given as a search domain, `{<kind>: <argument>}`.

    Infinite values are let through here so that the parameter's check names them the way it
    names a fixed value (`must be a finite number`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: ClassVar[str]

    @property
    def argument(self) -> Any:
        return getattr(self, self.kind)

    def candidates(self) -> list[Any]:
        """Values to validate the domain with: every grid/choice value, or both ends of a range."""
        return list(self.argument)

    def typical_draw(self) -> float | None:
        """A draw to validate beside the candidates (None where the candidates are every draw)."""
        return None

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        arg = data.get(cls.kind) if isinstance(data, dict) else None
        problem = cls._shape_problem(arg)
        if problem:
            raise ValueError(problem)
        return data

    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        return None


class _Listed(Domain):
    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        return None if isinstance(arg, list | tuple) and arg else f"{cls.kind} needs a non-empty list"


class Grid(_Listed):
    """Every value, each a configuration of its own (the grids of a method multiply)."""

    kind: ClassVar[str] = "grid"
    grid: list[Any]


class Choice(_Listed):
    """One value drawn per sample."""

    kind: ClassVar[str] = "choice"
    choice: list[Any]

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.choice)


Number = int | float  # a bound as written: `[1, 3]` stays integers in the spec's dump


class _Range(Domain):
    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        if not (isinstance(arg, list | tuple) and len(arg) == 2 and all(isinstance(a, int | float) for a in arg)):
            return f"{cls.kind} needs [low, high]"
        low, high = arg
        if not low < high:
            return f"{cls.kind} needs low < high, got [{low}, {high}]"
        return None

    @property
    def low(self) -> Number:
        return self.argument[0]

    @property
    def high(self) -> Number:
        return self.argument[1]

    def typical_draw(self) -> float | None:
        """A draw strictly inside the range and not a whole number, as nearly every real draw is.

        The bounds alone do not show what the parameter will receive: `{uniform: [1, 3]}` has
        integer bounds but draws floats like 2.69, which an integer parameter rejects."""
        draw = math.nan  # replaced on the loop's first pass
        for fraction in (0.5, 1 / 3, 0.6180339887498949):
            draw = self._at(fraction)
            if self.low < draw < self.high and not float(draw).is_integer():
                break
        return float(draw)

    def _at(self, fraction: float) -> float:
        return self.low + (self.high - self.low) * fraction

    def sample(self, rng: random.Random) -> Any:
        return rng.uniform(self.low, self.high)


class Uniform(_Range):
    kind: ClassVar[str] = "uniform"
    uniform: tuple[Number, Number]


class LogUniform(_Range):
    kind: ClassVar[str] = "loguniform"
    loguniform: tuple[Number, Number]

    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        return super()._shape_problem(arg) or (None if arg[0] > 0 else "loguniform needs a positive low bound")

    def _at(self, fraction: float) -> float:
        return math.exp(math.log(self.low) + (math.log(self.high) - math.log(self.low)) * fraction)

    def sample(self, rng: random.Random) -> Any:
        return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))


class RandInt(_Range):
    kind: ClassVar[str] = "randint"
    randint: tuple[int, int]

    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        problem = super()._shape_problem(arg)
        return problem or (None if all(isinstance(a, int) for a in arg) else "randint needs integer bounds")

    def candidates(self) -> list[Any]:
        return [self.low, self.high - 1]  # Tune's randint excludes the upper bound, and so does the draw

    def typical_draw(self) -> float | None:
        return None

    def sample(self, rng: random.Random) -> Any:
        return rng.randrange(*self.randint)


DOMAINS: dict[str, type[Domain]] = {d.kind: d for d in (Grid, Choice, Uniform, LogUniform, RandInt)}
DOMAIN_KINDS = tuple(DOMAINS)
Sampled = Choice | Uniform | LogUniform | RandInt  # drawn `search.num_samples` times per grid point


def is_domain(value: Any) -> TypeGuard[dict[str, Any]]:
    """A method parameter written as `{grid: [...]}` (or choice/uniform/...) is a search domain."""
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in DOMAIN_KINDS


def as_domain(value: Domain | dict[str, Any]) -> Domain:
    """The typed domain of `{kind: argument}`; a ValueError says what the argument lacks."""
    return value if isinstance(value, Domain) else DOMAINS[next(iter(value))].model_validate(value)


def domain_candidates(value: Domain | dict[str, Any]) -> list[Any]:
    return as_domain(value).candidates()


def domain_draw(value: Domain | dict[str, Any]) -> float | None:
    return as_domain(value).typical_draw()

