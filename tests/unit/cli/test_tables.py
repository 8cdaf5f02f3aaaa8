"""The trial table `drydock sweep` prints: a missing value of any kind reads "-"."""

from __future__ import annotations

from pipeline import results as results_table
from pipeline.cli.tables import summary_table


def test_missing_values_print_as_a_dash_and_numbers_with_their_digits():
    frame = results_table.to_frame([
        results_table.trial_row("kd-a-s0", "kd", 0, {}, "finished", {"metric": 0.75, "teacher_metric": 0.8, "num_params_encoder": 1200,
                                                                      "train_seconds": 12.34}),
        results_table.trial_row("kd-b-s0", "kd", 0, {}, "failed", error="boom"),  # NaN floats, pandas' NA integers
    ])
    rows = [[cell.strip() for cell in line.strip(" │").split("│")] for line in summary_table(frame).splitlines() if "kd-" in line]
    assert rows == [["kd-a-s0", "finished", "0.7500", "0.938", "1200", "12.3"], ["kd-b-s0", "failed", "-", "-", "-", "-"]]
