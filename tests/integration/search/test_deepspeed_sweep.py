"""`drydock sweep` under DeepSpeed ZeRO-2 and ZeRO-3 with two Ray Train workers per trial, on the
CPU (gloo): multi-phase methods finish, and every export is float32 and verified.

Everything is shrunk to what the checks need (128 examples, 8 optimizer steps, one teacher shared
by both sweeps, fine-tuned on the workers); Ray Train's start-up per trial is most of the time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from pipeline.config import load_spec
from pipeline.errors import SpecError

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
PRESETS = ROOT / "cluster" / "deepspeed"
pytestmark = [pytest.mark.ray, pytest.mark.slow]

NUM_TRAIN, BATCH, EPOCHS = 128, 32, 2
STEPS = EPOCHS * math.ceil(NUM_TRAIN / BATCH)  # optimizer steps of the labeled training: 8
MINILM_DISTILL_STEPS = round(0.5 * math.ceil(NUM_TRAIN / BATCH))  # distill_epochs 0.5 on the train text: 2
SMALL = [  # the same task and teacher in both sweeps: the teacher is fine-tuned once
    f"task.synthetic.num_train={NUM_TRAIN}", "task.synthetic.num_dev=64", f"train.batch_size={BATCH}",
    f"train.epochs={EPOCHS}", "train.eval_every=4", "teacher.finetune.epochs=1", "search.scheduler=fifo",
    "search.max_failures=0", "resources.strategy=deepspeed", "resources.workers_per_trial=2",
    "selection.latency.min_runs=1", "selection.latency.min_seconds=0.01", "selection.latency.warmup=0",
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("ds-sweeps")


def check_trials(frame, workdir: Path, expected_steps: dict[str, int]):
    """Every trial finished on 2 DeepSpeed ranks with the steps the spec implies, and its student
    is float32 in its safetensors and passed the driver's verification."""
    from mlflow import MlflowClient

    seen = frame[["trial_id", "method", "status", "steps", "error"]].to_string()
    assert sorted(frame["method"]) == sorted(expected_steps) and (frame["status"] == "finished").all(), seen
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    for _, row in frame.iterrows():
        student = Path(row["student_path"])
        outcome = json.loads((student.parent / "outcome.json").read_text())
        assert (outcome["strategy"], outcome["world_size"]) == ("deepspeed", 2), (row["method"], outcome)
        assert outcome["steps"] == row["steps"] == expected_steps[row["method"]], (row["method"], outcome)
        files = list(student.glob("*.safetensors"))
        assert files, f"{row['method']}: no safetensors in {student}"
        for file in files:
            with safe_open(str(file), framework="pt") as f:
                dtypes = {name: f.get_tensor(name).dtype for name in f.keys()}
            assert dtypes and set(dtypes.values()) == {torch.float32}, (row["method"], file.name, dtypes)
        diff = client.get_run(row["mlflow_run_id"]).data.metrics.get("export_max_abs_diff")
        assert diff is not None and diff <= 1e-4, (row["method"], diff)
    return client


def test_zero2_two_workers_accumulating_runs_theseus_and_cofi_to_verified_float32_exports(ray_local, workdir):
    """ZeRO-2 partitions gradients and optimizer state across the 2 ranks while each rank may run
    different modules (theseus' and cofi's per-rank draws) and the methods switch phases (and cofi
    its shapes); grad_accumulation 2 halves the micro-batch, not the number of optimizer steps.
    (MiniLM's three phases run in the ZeRO-3 sweep below; a third trial here cost the suite ~40 s.)
    The teacher is fine-tuned on the trial's two DeepSpeed workers, as a GPU sweep does by
    default, its evaluations reach the driver's log while it trains, and it is cached for the
    trials (and for the ZeRO-3 sweep below)."""
    from pipeline.prepare.stage import prepare
    from pipeline.sweep import run_sweep
    from pipeline.training.teacher import teacher_key

    spec = load_spec(SMOKE, [
        *SMALL, "name=ds-zero2", "tracking.experiment=ds-zero2", "train.grad_accumulation=2",
        "resources.deepspeed.zero_stage=2", f"resources.deepspeed.preset={PRESETS / 'zero2.json'}",
        "resources.teacher_placement=workers",
        "methods={theseus: {schedule: constant, base_rate: 0.5, replacing_fraction: 0.5}, "
        "cofi: {distill_warmup_fraction: 0.25, pruning_fraction: 0.5}}",
    ])
    teacher_dir = workdir / "teachers" / teacher_key(spec, prepare(spec, workdir))
    assert not teacher_dir.exists()
    messages: list[str] = []
    frame = run_sweep(spec, workdir, log=messages.append)
    assert any("on 2 Train worker(s) (deepspeed, CPU)" in m for m in messages), messages
    progress = [m for m in messages if m.startswith("teacher: step ")]
    assert [m.split(":")[1] for m in progress] == [" step 4"] and " accuracy 0." in progress[0], messages
    teacher = json.loads((teacher_dir / "teacher_metrics.json").read_text())
    assert teacher["steps"] == math.ceil(NUM_TRAIN / BATCH)  # 1 epoch at the global batch, not per worker
    assert (frame["teacher_metric"] == teacher["eval/accuracy"]).all()
    client = check_trials(frame, workdir, {"theseus": STEPS, "cofi": STEPS})
    # theseus ran both phases of the constant schedule: rate 0.5 for half of training, then 1
    run_id = frame.set_index("method").loc["theseus", "mlflow_run_id"]
    rates = [(m.step, m.value) for m in client.get_metric_history(run_id, "schedule/replacement_rate")]
    assert sorted(rates) == [(4, 0.5), (8, 1.0)], rates


def test_zero3_two_workers_runs_minilm_and_refuses_methods_whose_ranks_run_different_modules(ray_local, workdir):
    """ZeRO-3 partitions the weights too, gathered module by module with a collective as each
    runs: MiniLM (three phases, each handing the next whole weights) finishes and exports float32
    (gathered) weights; theseus and cofi, whose ranks run different modules, would deadlock and
    are refused up front. (kd under ZeRO-3: tests/integration/training/
    test_deepspeed_equivalence.py, without Ray.)"""
    from pipeline.sweep import run_sweep

    shipped = json.loads((PRESETS / "zero3.json").read_text())
    assert shipped["zero_optimization"]["stage"] == 3
    # the shipped preset with every parameter partitioned between uses: below its persistence
    # threshold (1e5 elements) each of this tiny model's parameters would stay whole once gathered
    preset = workdir / "zero3-partition-everything.json"
    shipped["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    preset.write_text(json.dumps(shipped))
    zero3 = [*SMALL, "resources.deepspeed.zero_stage=3", f"resources.deepspeed.preset={preset}"]
    with pytest.raises(SpecError) as refused:
        load_spec(SMOKE, [*zero3, "methods={theseus: {schedule: constant}, cofi: {}}"])
    assert all(f"methods.{name}: cannot train under resources.deepspeed.zero_stage 3 with 2 workers" in str(refused.value)
               for name in ("theseus", "cofi")), refused.value
    spec = load_spec(SMOKE, [*zero3, "name=ds-zero3", "tracking.experiment=ds-zero3", "methods={minilm: {distill_epochs: 0.5}}"])
    frame = run_sweep(spec, workdir, log=lambda _: None)
    # minilm distils on the task's text before its fine-tuning, which gets the whole budget
    check_trials(frame, workdir, {"minilm": MINILM_DISTILL_STEPS + STEPS})
