"""How a spec's problems read: one `field.path: what was expected` line per pydantic error, and
"did you mean" for a likely typo, so the user never has to open the schema to find the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticCustomError

from pipeline.errors import redacted


def did_you_mean(word: str, known: Any, prefix: str = "") -> str:
    """`; did you mean <prefix><closest>?` when one of `known` is a likely typo's target, else ''.
    A typo's error names the fix, so the user never has to open the schema to find it."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The spec model a field holds (`FilesSource | None` holds FilesSource), or None for a value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_of, getattr(annotation, "__args__", ())) if m is not None), None)


def _known_keys(schema: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The keys `schema` takes beside an unknown key at `loc` (empty under a free-form mapping)."""
    model = schema
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) if model is not None else None
        model = _model_of(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


# the type of the error a section's own check raises about one of its fields (`field_problem`)
FIELD_PROBLEM = "drydock_field_problem"


def field_problem(field: str, message: str) -> PydanticCustomError:
    """A section's check that reads several fields, blaming one: reported as `section.field: message`."""
    return PydanticCustomError(FIELD_PROBLEM, "{message}", {"field": field, "message": message})


def format_error(err: Mapping[str, Any], schema: type[BaseModel] | None = None, hint: str = "") -> str:
    """One pydantic error as `field.path: what was expected`. An unknown key is matched against
    the keys `schema` (the model the error's path starts at) takes there; `hint` ends a
    validator's own message (the loader's guess at a misspelt task name)."""
    loc = ".".join(str(p) for p in err["loc"]) or "(spec)"
    msg = err["msg"]
    if err["type"] == FIELD_PROBLEM:
        return f"{'.'.join([*map(str, err['loc']), err['ctx']['field']])}: {err['ctx']['message']}"
    if err["type"] == "extra_forbidden":
        *parent, key = tuple(err["loc"]) or ("",)
        hint = did_you_mean(key, _known_keys(schema, (*parent, key)), "".join(f"{p}." for p in parent))
        msg = f"unknown key (not part of the spec){hint}" if hint else "unknown key (not part of the spec; check the spelling)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):] + hint
    elif err["type"] == "finite_number":
        msg = "must be a finite number"
    elif err["type"] in ("literal_error", "enum") and not isinstance(err.get("input"), (dict, list)):
        return f"{loc}: {_not_one_of(err['input'], err.get('ctx', {}).get('expected', ''))}"
    elif err["type"] in NUMBER_EXPECTED:
        msg = NUMBER_EXPECTED[err["type"]]
    given = err.get("input")
    if err["type"] not in ("extra_forbidden", "missing") and not isinstance(given, (dict, list)):
        shown = repr(redacted(given) if isinstance(given, str) and "://" in given else given)  # a URI's password never echoed
        msg = f"{msg} (got {shown if len(shown) <= 80 else shown[:60] + '…'})"
    return f"{loc}: {msg}"


# pydantic's wording for a value that is not a number, said as the other messages say it
NUMBER_EXPECTED = {"float_parsing": "expected a number", "float_type": "expected a number",
                   "int_parsing": "expected a whole number", "int_type": "expected a whole number",
                   "int_from_float": "expected a whole number"}


def _not_one_of(given: Any, expected: str) -> str:
    """`'tpe' is not one of fifo, asha; did you mean …?` from pydantic's `'fifo' or 'asha'`."""
    import re

    options = [m.group(1) or m.group(2) for m in re.finditer(r"'([^']*)'|(-?\d+(?:\.\d+)?)", expected)]
    return f"{given!r} is not one of {', '.join(options)}{did_you_mean(str(given), options)}"


def param_error(err: Mapping[str, Any]) -> str:
    """A pydantic error about a method's parameters, as the text after `methods.<name>.<param>: `."""
    return format_error({**err, "loc": ()}).split(": ", 1)[1]

