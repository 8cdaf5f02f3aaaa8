"""An object that crosses Ray unopened: pickled once where it is made, unpickled where it is used.

A trial's parameters and the validated spec are pydantic models of a method's classes, and
unpickling one imports that method's module, with torch and transformers. The trial driver and the
Train controller only pass them on to the Train workers (`pipeline.search.driver` says why they
must stay light), so these travel as pickled bytes that only the worker opens: the same objects,
never dumped to dicts nor validated again on the way.
"""

from __future__ import annotations

import pickle
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Sealed(Generic[T]):
    """`value`, pickled whenever this is, and unpickled on the first `open()` after it travelled."""

    __slots__ = ("_pickled", "_value")

    def __init__(self, value: T) -> None:
        self._value: T | None = value
        self._pickled: bytes | None = None

    @classmethod
    def _from_pickled(cls, pickled: bytes) -> Sealed[Any]:
        sealed: Sealed[Any] = cls.__new__(cls)
        sealed._value, sealed._pickled = None, pickled
        return sealed

    def open(self) -> T:
        if self._value is None:
            assert self._pickled is not None
            self._value = pickle.loads(self._pickled)  # noqa: S301 - bytes this sweep pickled itself
        return self._value

    def __reduce__(self) -> tuple[Any, ...]:
        pickled = self._pickled if self._pickled is not None else pickle.dumps(self._value)
        return (Sealed._from_pickled, (pickled,))
