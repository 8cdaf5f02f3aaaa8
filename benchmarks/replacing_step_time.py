"""Training-step time of module replacing (Theseus, DCR) against the teacher's and student's steps.

    .venv/bin/python benchmarks/replacing_step_time.py [--device cpu|cuda] [--rounds 10]
        [--clock wall|cpu] [--threads N] [--full-finetune]

A MiniLM-shaped BERT built from a config (6 layers, hidden 384, 12 heads, intermediate 1536,
vocab 30522; random weights — speed does not depend on them) is the teacher; the student has 3
layers, so each successor replaces a pair of teacher layers. Every step is a full optimizer step
through the loop's own `Engine` (loss, backward, clipping, AdamW, LR schedule) on batch 32 ×
sequence 64.

The reference steps train the encoder layers only, embeddings and head frozen — the same
trainable set as the replacing methods — so a ratio measures what replacing itself costs. With
`--full-finetune` the usual fine-tuning steps (every parameter trained, including the
11.7M-parameter embedding matrix) are timed too, for scale.

Expected (the claims the methods' docstrings make):
- Theseus at rate p runs about the active layers: p = 0 runs every teacher layer but needs no
  backward at all (nothing trainable ran), p = 1 is a student step (ratio to student <= 1.05).
- DCR while blending costs at most a teacher step plus a student step; at alpha = 0 a student step.

Steps of all configurations are interleaved round by round and the median is reported, so load
from other processes spreads over every configuration alike. On a CPU shared with other work,
wall time still swings several-fold from step to step; `--clock cpu --threads 1` times the CPU
this process itself spent (one thread, so no time spinning in idle worker threads is counted),
which measures the work a step does rather than its share of a busy machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from transformers import BertConfig, BertForSequenceClassification

from methods._bert import encoder_layers
from methods.base import (
    Method,
    MethodContext,
    ParamGroup,
    Phase,
    Progress,
    StudentDefaults,
    TaskInfo,
    decay_groups,
)
from methods.dcr import DeterministicContinuousReplacement
from methods.finetune import Finetune
from methods.theseus import Theseus
from pipeline.config import TrainConfig
from pipeline.training.engine import Distributed, Engine, check_groups

TASK = TaskInfo("bench", 2, False, ("neg", "pos"))
TOTAL_STEPS = 10_000  # schedules are pinned below; only the plan's length needs a value


class LayersOnlyFinetune(Finetune):
    """Fine-tuning with embeddings and head frozen: the replacing methods' trainable set."""

    def param_groups(self, phase: Phase) -> list[ParamGroup]:
        return decay_groups("student", encoder_layers(self.model).named_parameters(), self.ctx.learning_rate, self.ctx.weight_decay)


def minilm_teacher(device: torch.device) -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
        max_position_embeddings=512, num_labels=2,
    )
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(config).to(device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def make_step(method: Method, batch: dict[str, torch.Tensor], device: torch.device) -> Callable[[], None]:
    """One optimizer step of `method`'s first phase, through the loop's Engine."""
    method.build()
    method.model.to(device)
    phase = method.phases(TOTAL_STEPS)[0]
    method.start_phase(phase)
    groups = method.param_groups(phase)
    check_groups(groups, phase, method.model)
    train = TrainConfig(batch_size=32, learning_rate=1e-5, warmup_ratio=0.0, max_grad_norm=1.0, bf16="off")
    engine = Engine(method, groups, phase, train, Distributed(device=device), micro_batch=32)
    progress = Progress(0, TOTAL_STEPS, phase.name, 0, phase.steps)

    def step() -> None:
        method.on_step(progress)
        engine.micro_step(batch, progress, 1.0)
        engine.optimizer_step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per configuration first")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-length", type=int, default=64)
    parser.add_argument("--full-finetune", action="store_true", help="also time steps that train every parameter")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"], help="wall time, or this process's CPU time")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.clock == "cpu" and device.type == "cuda":
        parser.error("--clock cpu measures host work only; time a GPU with --clock wall")
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    teacher = minilm_teacher(device)
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(1000, 30522, (args.batch_size, args.seq_length), generator=g),
        "attention_mask": torch.ones(args.batch_size, args.seq_length, dtype=torch.long),
        "token_type_ids": torch.zeros(args.batch_size, args.seq_length, dtype=torch.long),
        "labels": torch.randint(0, 2, (args.batch_size,), generator=g),
    }
    batch = {k: v.to(device) for k, v in batch.items()}

    def ctx() -> MethodContext:
        return MethodContext(task=TASK, teacher=teacher, load_pretrained=lambda: teacher, student=StudentDefaults(num_layers=3))

    def theseus(rate: float) -> Method:
        return Theseus({"schedule": "constant", "base_rate": rate, "replacing_steps": TOTAL_STEPS}, ctx())

    def dcr(alpha: float) -> Method:
        return DeterministicContinuousReplacement({"schedule": "piecewise", "points": [(0.0, alpha)], "dfg_weight": 1.0}, ctx())

    configs = {
        "teacher step (layers trained)": LayersOnlyFinetune({"num_layers": 6}, ctx()),
        "student step (layers trained)": LayersOnlyFinetune({"num_layers": 3}, ctx()),
        "theseus p=0": theseus(0.0),
        "theseus p=0.5": theseus(0.5),
        "theseus p=1": theseus(1.0),
        "dcr alpha=0.5 + DFG": dcr(0.5),
        "dcr alpha=0": dcr(0.0),
    }
    if args.full_finetune:
        configs["teacher fine-tuning step (all trained)"] = Finetune({"num_layers": 6}, ctx())
        configs["student fine-tuning step (all trained)"] = Finetune({"num_layers": 3}, ctx())
    steps = {name: make_step(method, batch, device) for name, method in configs.items()}
    torch.manual_seed(0)  # the Bernoulli draws of theseus p=0.5
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = clock()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(clock() - start)

    medians = {name: statistics.median(values) for name, values in times.items()}
    teacher_ms = medians["teacher step (layers trained)"]
    student_ms = medians["student step (layers trained)"]
    print(
        f"device {args.device} ({torch.get_num_threads()} threads), {args.clock} clock, batch {args.batch_size} × "
        f"seq {args.seq_length}, 6-layer teacher → 3 successors, hidden 384; median of {args.rounds} steps each"
    )
    print(f"{'configuration':42s} {'median ms':>10s} {'÷ teacher':>10s} {'÷ student':>10s}")
    for name, seconds in medians.items():
        print(f"{name:42s} {seconds * 1e3:10.1f} {seconds / teacher_ms:10.3f} {seconds / student_ms:10.3f}")
    ratio = medians["theseus p=1"] / student_ms
    print(f"theseus p=1 ÷ student step = {ratio:.3f} ({'within' if ratio <= 1.05 else 'ABOVE'} the 1.05 bound)")
    blend_bound = medians["dcr alpha=0.5 + DFG"] / (teacher_ms + student_ms)
    print(f"dcr blending ÷ (teacher + student step) = {blend_bound:.3f} ({'within' if blend_bound <= 1.0 else 'ABOVE'} 1)")


if __name__ == "__main__":
    main()
