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


def test_the_runtimes_table_names_each_configuration_marks_the_front_and_the_champion():
    """The int8 front `drydock sweep` prints after the configurations' front: the teacher first,
    then the students fastest first, each by its configuration's name, ★ on the front over
    (configuration, runtime), ◆ on the variant the registry serves (the most accurate on it)."""
    from pipeline.cli.tables import runtimes_table_text
    from pipeline.config import SelectionConfig
    from tests.unit.select.test_variants import table

    variants = table({"kd-a-s0/torch": (0.86, 4.0, 3.8, 4.2), "kd-a-s0/onnxruntime-int8": (0.855, 2.0, 1.9, 2.1),
                      "kd-b-s0/torch": (0.80, 4.1, 3.9, 4.3), "kd-b-s0/onnxruntime-int8": (0.79, 2.1, 2.0, 2.2)})
    frame = results_table.to_frame([
        results_table.trial_row("kd-a-s0", "kd", 0, {"alpha": 0.5}, "finished", {"metric": 0.86}),
        results_table.trial_row("kd-b-s0", "kd", 0, {"alpha": 0.9}, "finished", {"metric": 0.80}),
    ])
    text = runtimes_table_text(variants, frame, SelectionConfig())
    rows = [[cell.strip() for cell in line.strip()[1:-1].split("│")] for line in text.splitlines() if line.startswith("│")]
    assert [(r[0], r[1], r[2], r[6]) for r in rows] == [
        ("teacher", "onnxruntime-int8", "0.8900", ""), ("teacher", "torch", "0.9000", ""),
        ("kd alpha=0.5", "onnxruntime-int8", "0.8550", "★"), ("kd alpha=0.9", "onnxruntime-int8", "0.7900", ""),
        ("kd alpha=0.5", "torch", "0.8600", "★ ◆"), ("kd alpha=0.9", "torch", "0.8000", ""),
    ]
    assert rows[2][3] == "2.00 [1.90–2.10]" and rows[2][4] == "5.00×"  # teacher/torch's 10 ms over 2 ms
    only_eager = variants[variants["runtime"] == "torch"]
    assert runtimes_table_text(only_eager, frame, SelectionConfig()) == ""  # nothing beyond eager: no second table
