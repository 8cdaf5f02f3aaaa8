"""The smallest spec the config tests start from, and the problems a spec is refused with."""

from __future__ import annotations

import pytest

from pipeline.config import spec_from_dict
from pipeline.errors import SpecError

MINIMAL = {
    "name": "t",
    "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
    "teacher": {"model": "bert-base-uncased"},
    "methods": {"kd": {"alpha": {"grid": [0.5, 0.9]}}},
}


def problems(raw: dict, overrides: list[str] | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(raw, overrides)
    return info.value.problems
