"""The loop's step count (pipeline/training/steps.py), which `drydock plan` shares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline.config import TrainConfig
from pipeline.training.steps import steps_per_epoch, total_steps


def test_total_steps_counts_partial_batches_and_epochs_and_stops_at_max_steps():
    assert steps_per_epoch(100, 32) == 4 and steps_per_epoch(0, 32) == 1
    assert total_steps(TrainConfig(epochs=2, batch_size=32), 100) == 8
    assert total_steps(TrainConfig(epochs=0.5, batch_size=32), 100) == 2
    assert total_steps(TrainConfig(epochs=2, batch_size=32, max_steps=5), 100) == 5


def test_the_step_count_imports_no_torch():
    """`drydock validate` and `drydock plan` count steps with it, and import no torch."""
    code = "import sys, pipeline.training.steps; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "False"
