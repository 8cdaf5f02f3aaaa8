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


def _timed_frame(rows: list[tuple[str, dict, float, float]]):
    """results.parquet after the select stage: (trial_id, params, metric, eager p50 ms) per kd trial."""
    frame = results_table.to_frame([results_table.trial_row(t, "kd", int(t[-1]), p, "finished", {"metric": m, "num_params": 1000})
                                    for t, p, m, _ in rows])
    frame["latency_ms"] = [ms for *_, ms in rows]
    frame["latency_p90_ms"] = [ms * 1.05 for *_, ms in rows]
    frame["speedup"] = [10.0 / ms for *_, ms in rows]
    return frame


def test_the_front_table_names_the_champion_the_registry_serves_when_it_is_an_int8_variant():
    """The eager front's most accurate (kd alpha=0.5) is not what the registry serves when the
    variants' front is led by another configuration's int8 export: the printed table must not
    mark it champion, and its champion line names the served variant and its runtime (the demo
    printed "◆ champion: finetune" while the alias went to theseus in onnxruntime-int8)."""
    from pipeline.cli.tables import pareto_table_text
    from pipeline.config import SelectionConfig
    from tests.unit.select.test_variants import table

    frame = _timed_frame([("kd-a-s0", {"alpha": 0.5}, 0.86, 4.0), ("kd-b-s0", {"alpha": 0.9}, 0.84, 3.0)])
    variants = table({"kd-a-s0/torch": (0.86, 4.0, 3.8, 4.2), "kd-a-s0/onnxruntime-int8": (0.85, 2.0, 1.9, 2.1),
                      "kd-b-s0/torch": (0.84, 3.0, 2.9, 3.1), "kd-b-s0/onnxruntime-int8": (0.87, 2.1, 2.0, 2.2)})
    eager_only = pareto_table_text(frame, SelectionConfig())
    assert "kd alpha=0.5 ◆" in eager_only and "◆ champion: kd alpha=0.5" in eager_only  # no variants: the configurations' rule
    text = pareto_table_text(frame, SelectionConfig(), variants)
    assert "◆ champion: kd alpha=0.9 in onnxruntime-int8" in text
    assert "kd alpha=0.5 ◆" not in text and "kd alpha=0.9 ◆" not in text  # neither eager row is what the alias serves
    # the variants' champion in eager fp32: its configuration's row carries the mark
    eager_wins = table({"kd-a-s0/torch": (0.86, 4.0, 3.8, 4.2), "kd-a-s0/onnxruntime-int8": (0.80, 2.0, 1.9, 2.1),
                        "kd-b-s0/torch": (0.84, 3.0, 2.9, 3.1), "kd-b-s0/onnxruntime-int8": (0.79, 2.1, 2.0, 2.2)})
    text = pareto_table_text(frame, SelectionConfig(), eager_wins)
    assert "kd alpha=0.5 ◆" in text and "◆ champion: kd alpha=0.5 in torch" in text


def test_the_runtimes_table_marks_a_served_export_never_another_seed():
    """The registry serves each configuration's best seed (`best_trial_id`) in its runtimes; a
    weaker seed's int8 variant that scored higher is not served, so it cannot be the ◆ row."""
    from pipeline.cli.tables import runtimes_table_text
    from pipeline.config import SelectionConfig
    from tests.unit.select.test_variants import table

    frame = _timed_frame([("kd-a-s0", {"alpha": 0.5}, 0.86, 4.0), ("kd-a-s1", {"alpha": 0.5}, 0.82, 4.0)])
    variants = table({"kd-a-s0/torch": (0.86, 4.0, 3.8, 4.2), "kd-a-s0/onnxruntime-int8": (0.85, 2.0, 1.9, 2.1),
                      "kd-a-s1/torch": (0.82, 4.0, 3.8, 4.2), "kd-a-s1/onnxruntime-int8": (0.88, 2.0, 1.9, 2.1)})
    text = runtimes_table_text(variants, frame, SelectionConfig())
    rows = {(r[2], r[1]): r[6] for r in ([c.strip() for c in line.strip()[1:-1].split("│")]
                                        for line in text.splitlines() if line.startswith("│"))}
    # the served seed's front: fp32 the most accurate (◆), int8 the fastest; seed 1 is not served
    assert rows[("0.8600", "torch")] == "★ ◆" and rows[("0.8500", "onnxruntime-int8")] == "★"
    assert rows[("0.8800", "onnxruntime-int8")] == "" and rows[("0.8200", "torch")] == ""


def test_with_eager_variants_only_the_champion_is_the_served_best_seed_and_none_when_no_variant_qualifies():
    """Several shapes in eager fp32 alone still run the variants job, and the registry then offers
    the alias to the served variants' champion (each configuration's best seed, by its own score),
    not to the configurations' champion by seed means; variants none of which qualifies leave
    the alias where it is, and the table says so instead of marking the eager rule's pick."""
    from math import nan

    from pipeline.cli.tables import pareto_table_text
    from pipeline.config import SelectionConfig
    from tests.unit.select.test_variants import table

    frame = _timed_frame([("kd-a-s0", {"alpha": 0.5}, 0.86, 4.0), ("kd-a-s1", {"alpha": 0.5}, 0.70, 4.0),
                          ("kd-b-s0", {"alpha": 0.9}, 0.80, 4.0), ("kd-b-s1", {"alpha": 0.9}, 0.80, 4.0)])
    assert "◆ champion: kd alpha=0.9" in pareto_table_text(frame, SelectionConfig())  # by seed means
    eager = table({"kd-a-s0/torch": (0.86, 4.0, 3.8, 4.2), "kd-b-s0/torch": (0.80, 4.0, 3.8, 4.2)})
    eager = eager[eager["runtime"] == "torch"]  # the teacher's int8 row too: nothing beyond eager fp32
    text = pareto_table_text(frame, SelectionConfig(), eager)
    assert "◆ champion: kd alpha=0.5 in torch\n" in text and "kd alpha=0.9 ◆" not in text  # no runtimes table: no pointer to one
    unscored = table({"kd-a-s0/torch": (nan, 4.0, 3.8, 4.2), "kd-b-s0/torch": (nan, 4.0, 3.8, 4.2)})
    text = pareto_table_text(frame, SelectionConfig(), unscored)
    assert "◆ champion: none" in text and "◆\n" not in text and " ◆ " not in text
