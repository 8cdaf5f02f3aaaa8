"""`drydock validate` / `drydock plan` say what a sweep will spend before it spends it (issue 23,
item 5): trials per method, steps per trial, the teacher's steps and a time labelled an
estimate, from the spec and the task's local files alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.cli import plan as plan_module
from pipeline.cli.main import main
from pipeline.cli.plan import CPU_FLOPS_PER_THREAD, count_rows, format_plan, layer_params, plan_sweep, train_rows
from pipeline.config import load_spec

ROOT = Path(__file__).resolve().parents[3]
ROWS = 1000  # in the train file the spec names


def write_spec(tmp_path: Path, **changes) -> Path:
    """A custom task on a local csv of ROWS rows, a random 2-layer teacher, two methods."""
    lines = ["text,label", *(f'"row {i}, with a comma",{i % 2}' for i in range(ROWS))]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n\n")  # a trailing blank line is not a row
    (tmp_path / "dev.csv").write_text("text,label\nx,0\n")
    spec = {
        "name": "plan",
        "task": {"name": "mytask", "source": "files", "files": {"train": str(tmp_path / "train.csv"), "dev": str(tmp_path / "dev.csv")},
                 "text_columns": ["text"], "num_labels": 2, "max_seq_length": 16, "max_train_samples": 500},
        "teacher": {"model": "random", "architecture": {"num_layers": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64},
                    "tokenizer": {"vocab_size": 64}, "finetune": {"epochs": 1, "batch_size": 50}},
        "student": {"num_layers": 1},
        "train": {"epochs": 2, "batch_size": 32, "grad_accumulation": 2},
        "seeds": [0, 1],
        "methods": {"finetune": {"learning_rate": {"grid": [1.0e-4, 2.0e-4]}},
                    "kd": {"alpha": {"grid": [0.5, 0.9]}, "temperature": {"uniform": [1.0, 4.0]}}},
        "search": {"num_samples": 3},
        "resources": {"workers_per_trial": 2, "cpus_per_worker": 1},
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            spec[section] = {**spec[section], field: value}
        else:
            spec[section] = value
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_rows_are_counted_in_the_local_file_and_capped_by_max_train_samples(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    assert count_rows(tmp_path / "train.csv", None) == ROWS  # quoted commas stay in their field, blank lines are not rows
    rows = train_rows(spec.task)
    assert (rows.count, rows.at_most) == (500, False)
    assert rows.basis == f"task.max_train_samples, of {ROWS:,} in {tmp_path / 'train.csv'}"
    uncapped = train_rows(load_spec(write_spec(tmp_path), ["task.max_train_samples=5000"]).task)
    assert (uncapped.count, uncapped.basis) == (ROWS, f"all of {tmp_path / 'train.csv'}")


def test_the_plan_counts_trials_steps_and_the_teachers_steps(tmp_path):
    plan = plan_sweep(load_spec(write_spec(tmp_path)), cpus=2)
    by_method = {m.method: m for m in plan.methods}
    # finetune: a grid of 2 × 2 seeds; kd: a grid of 2 × 3 draws of temperature × 2 seeds
    assert (by_method["finetune"].configurations, by_method["finetune"].trials) == (2, 4)
    assert (by_method["kd"].configurations, by_method["kd"].trials) == (6, 12)
    assert plan.trials == 16 and plan.configurations == 8
    # the loop's count: ceil(500 rows / global batch 32) = 16 steps an epoch, × 2 epochs
    assert (plan.steps_per_epoch, plan.steps) == (16, 32)
    assert all(m.steps == 32 for m in plan.methods)
    assert "global batch 32: 2 worker(s) × micro-batch 8 × 2 accumulation" == plan.batch
    # the teacher: its own settings (1 epoch, batch 50) on the same 500 rows
    assert plan.teacher.startswith("10 fine-tuning steps (1 epoch(s), batch 50)")
    assert plan.parallel == 1  # a trial holds 2 workers × 1 CPU; this machine has 2


def test_a_searching_plan_states_the_algorithm_and_budget_and_estimates_its_trials(tmp_path):
    search = {"algorithm": "tpe", "num_configurations": 7, "time_budget": "90m"}
    plan = plan_sweep(load_spec(write_spec(tmp_path, search=search)), cpus=2)
    assert plan.search == ("tpe over finetune, kd: 7 configuration(s) in all, each once per seed, aiming at metric; "
                           "no new configuration after 1.5 h")
    assert (plan.configurations, plan.trials) == (7, 14)  # × 2 seeds; which methods the study picks is not known
    text = format_plan(plan)
    assert "  search:   tpe over finetune, kd" in text and "  trials:   14 (7 configuration(s) × 2 seed(s))" in text
    assert all(m.configurations == 0 and m.trials == 0 for m in plan.methods)
    assert plan_sweep(load_spec(write_spec(tmp_path)), cpus=2).search == ""


def test_the_time_estimate_follows_its_documented_formula(tmp_path):
    plan = plan_sweep(load_spec(write_spec(tmp_path)), cpus=2)
    layer = layer_params(32, 64)
    assert layer == 4 * 32 * 32 + 2 * 32 * 64 + 9 * 32 + 64 == 8544
    tokens, threads = 32 * 16, 2
    student = 6 * layer * tokens / (CPU_FLOPS_PER_THREAD * threads)  # 1 student layer, forward and backward
    teacher_forward = 2 * (2 * layer) * tokens / (CPU_FLOPS_PER_THREAD * threads)
    by_method = {m.method: m for m in plan.methods}
    # a method that needs the teacher may run it forward every step: the upper end of its range
    # (finetune needs it only for its initial weights, `init_from: finetuned`, the default)
    assert by_method["finetune"].seconds == pytest.approx((32 * student, 32 * (student + teacher_forward)))
    assert by_method["kd"].seconds == pytest.approx((32 * student, 32 * (student + teacher_forward)))
    pretrained = plan_sweep(load_spec(write_spec(tmp_path), ["methods.finetune.init_from=pretrained"]), cpus=2)
    assert pretrained.methods[0].seconds == pytest.approx((32 * student, 32 * student))  # no teacher at all
    # the teacher runs in the sweep's own process on this machine's 2 CPUs: 10 steps of 2 layers, batch 50 × 16
    assert plan.teacher_seconds == pytest.approx(10 * 6 * 2 * layer * 50 * 16 / (CPU_FLOPS_PER_THREAD * 2))


def test_the_estimate_is_at_this_machines_probed_speed_and_says_so(tmp_path, monkeypatch, capsys):
    """The same spec's plan said 9-12 minutes and the demo took 25 on a day this machine ran at
    half the speed the constant assumed: `drydock plan` probes the machine, `validate` does not."""
    import drydock
    from pipeline.cli import plan as plan_module

    reference = plan_sweep(load_spec(write_spec(tmp_path)), cpus=2)
    half = plan_sweep(load_spec(write_spec(tmp_path)), cpus=2, flops_per_thread=CPU_FLOPS_PER_THREAD / 2)
    assert half.teacher_seconds == pytest.approx(2 * reference.teacher_seconds)
    assert [m.seconds for m in half.methods] == [pytest.approx(tuple(2 * s for s in m.seconds)) for m in reference.methods]
    assert "measured on a MiniLM-sized step" in format_plan(reference)
    assert f"({plan_module.TRAINING_SHARE:g} × this machine's float32 matrix product on one thread, probed now)" in format_plan(half)

    probes: list[float] = []
    monkeypatch.setattr(plan_module, "probe_flops_per_thread", lambda: probes.append(1.0) or 1.2e10)
    assert not drydock.validate(write_spec(tmp_path)).probed and probes == []
    probed = drydock.plan(write_spec(tmp_path))
    assert probed.probed and probed.flops_per_thread == 1.2e10 and probes == [1.0]
    assert main(["plan", str(write_spec(tmp_path))]) == 0
    assert "at 12 GFLOP/s per CPU thread" in capsys.readouterr().out and probes == [1.0, 1.0]


def test_the_probe_measures_one_thread_and_leaves_the_blas_threads_as_they_were():
    from threadpoolctl import threadpool_info

    from pipeline.cli.plan import probe_matmul_flops

    before = [pool["num_threads"] for pool in threadpool_info()]
    flops = probe_matmul_flops(repeats=3)
    assert 1e8 < flops < 1e13  # a CPU thread's float32 products: between 0.1 and 10,000 GFLOP/s
    assert [pool["num_threads"] for pool in threadpool_info()] == before


def test_validate_counts_in_one_line_and_plan_prints_the_table(tmp_path, capsys):
    path = write_spec(tmp_path)
    assert main(["validate", str(path)]) == 0
    valid = f"{path}: valid (sweep 'plan', task mytask, methods: finetune, kd; 16 trial(s) of 32 steps, teacher 10 steps; " \
            "`drydock plan` for the table and a time estimate)"
    assert capsys.readouterr().out == valid + "\n"  # one line: scripts read it
    assert main(["plan", str(path)]) == 0
    first, *out = capsys.readouterr().out.splitlines()
    assert first == valid
    assert f"  data:     500 training rows (task.max_train_samples, of {ROWS:,} in {tmp_path / 'train.csv'})" in out
    assert "  steps:    32 a trial: 2 epoch(s) × 16 steps, global batch 32: 2 worker(s) × micro-batch 8 × 2 accumulation" in out
    assert "  trials:   16 (8 configuration(s) × 2 seed(s))" in out
    rows = {line.split()[0]: line.split()[1:4] for line in out if line.startswith("    ") and "configurations" not in line}
    assert rows == {"finetune": ["2", "4", "32"], "kd": ["6", "12", "32"], "total": ["8", "16", "512"]}
    assert out[-1].startswith("  time:     ≈ ") and "(an estimate: " in out[-1]


def test_rows_unknown_and_hub_rows_bounded_by_max_train_samples(tmp_path):
    missing = load_spec(write_spec(tmp_path), [f"task.files.train={tmp_path / 'gone.csv'}", "task.max_train_samples=null"])
    plan = plan_sweep(missing, cpus=2)
    assert plan.steps is None and plan.rows.count is None
    text = format_plan(plan)
    assert "steps:    unknown (the training rows are unknown)" in text and "time:     no estimate" in text
    hub = load_spec(write_spec(tmp_path), ["task.source=hub", "task.max_train_samples=320"])
    rows = train_rows(hub.task)
    assert (rows.count, rows.at_most) == (320, True)
    assert "  steps:    at most 20 a trial" in format_plan(plan_sweep(hub, cpus=2))


def test_the_teachers_steps_are_the_teacher_stages(tmp_path):
    from pipeline.training.steps import total_steps
    from pipeline.training.teacher import teacher_train_config

    for sets in ([], ["teacher.finetune.max_steps=7"], ["teacher.finetune.epochs=0.5", "train.grad_accumulation=4"]):
        spec = load_spec(write_spec(tmp_path), sets)
        for rows in (1, 499, 500, 10_001):
            assert total_steps(plan_module.teacher_steps_config(spec), rows) == total_steps(teacher_train_config(spec), rows)


def test_a_given_teacher_is_not_fine_tuned(tmp_path):
    spec = load_spec(write_spec(tmp_path), [f"teacher.finetuned={tmp_path}"])
    plan = plan_sweep(spec, cpus=2)
    assert plan.teacher == f"given (teacher.finetuned: {tmp_path}); not fine-tuned" and plan.teacher_seconds is None


def test_glue_folders_match_the_data_stage():
    from pipeline.prepare import glue_dir

    layouts = glue_dir._GLUE_LAYOUTS  # the data stage's own table: the plan must look where it reads
    assert plan_module.GLUE_FOLDERS == {name: layout.folder for name, layout in layouts.items()}
    assert plan_module.HEADERLESS == {name for name, layout in layouts.items() if layout.names is not None}


@pytest.mark.data
def test_theseus_sst2_plan_from_the_shared_glue_copy(glue_dir, monkeypatch, capsys):
    glue = glue_dir
    monkeypatch.setenv("GLUE_DIR", str(glue))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec = ROOT / "sweeps" / "theseus-sst2.yaml"
    assert main(["validate", str(spec)]) == 0
    assert capsys.readouterr().out == (f"{spec}: valid (sweep 'theseus-sst2', task sst2, methods: finetune, theseus, dcr; "
                                       "100 trial(s) of 1,250 steps, teacher 500 steps; `drydock plan` for the table and a time estimate)\n")
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out
    assert f"  data:     8,000 training rows (task.max_train_samples, of 67,349 in {glue / 'SST-2' / 'train.tsv'})" in out
    assert "  steps:    1,250 a trial: 5 epoch(s) × 250 steps" in out
    assert "  teacher:  500 fine-tuning steps (2 epoch(s), batch 32)" in out
    assert "  trials:   100 (100 configuration(s) × 1 seed(s))" in out
    rows = {line.split()[0]: line.split()[1:4] for line in out.splitlines() if line.startswith("    ") and "configurations" not in line}
    assert rows == {"finetune": ["2", "2", "1,250"], "theseus": ["90", "90", "1,250"], "dcr": ["8", "8", "1,250"],
                    "total": ["100", "100", "125,000"]}


def test_a_spec_that_groups_by_length_is_told_its_estimate_is_an_upper_bound(tmp_path):
    plain = format_plan(plan_sweep(load_spec(write_spec(tmp_path)), cpus=2))
    grouped = format_plan(plan_sweep(load_spec(write_spec(tmp_path), ["train.group_by_length=true"]), cpus=2))
    bound = "every row counted at task.max_seq_length, while train.group_by_length pads a batch to about its rows' own length"
    assert bound in grouped and bound not in plain
