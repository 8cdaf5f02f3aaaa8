"""A trial's outcome file: what its rank-0 worker (or its driver, when the worker never got that
far) says about how it ended, read by the recorder. Written atomically: a reader sees the old
outcome or the new one, never half of one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.workdir import OUTCOME_FILE as OUTCOME_FILE
from pipeline.workdir import atomic_write


def write_outcome(output_dir: Path, outcome: dict[str, Any]) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(output_dir / OUTCOME_FILE, json.dumps(outcome, indent=2, default=str))


def read_outcome(trial_dir: Path) -> dict[str, Any] | None:
    path = trial_dir / OUTCOME_FILE
    return json.loads(path.read_text()) if path.is_file() else None
