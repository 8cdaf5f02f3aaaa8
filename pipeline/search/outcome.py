"""A trial's outcome file: what its rank-0 worker (or its driver, when the worker never got that
far) says about how it ended, read by the recorder. Written atomically: a reader sees the old
outcome or the new one, never half of one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

OUTCOME_FILE = "outcome.json"


def write_outcome(output_dir: Path, outcome: dict[str, Any]) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    tmp = output_dir / f".{OUTCOME_FILE}.tmp"
    tmp.write_text(json.dumps(outcome, indent=2, default=str))
    os.replace(tmp, output_dir / OUTCOME_FILE)


def read_outcome(trial_dir: Path) -> dict[str, Any] | None:
    path = trial_dir / OUTCOME_FILE
    return json.loads(path.read_text()) if path.is_file() else None
