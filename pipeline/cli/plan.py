"""What a sweep will spend, from the spec alone: `drydock plan` prints it (`drydock validate` its
counts), so that a grid typed one value too long costs a glance, not a night.

Nothing is downloaded and no model is loaded. The trials are the sweep's own expansion
(`pipeline.search.space.expand_trials`: grids × draws of the random domains, duplicates dropped,
× seeds), the steps the loop's own count (`pipeline.training.steps.total_steps`, the teacher's
with its own epochs, batch and step cap). The training rows are counted in the task's local files when it
has them (counted, not checked: the data stage still refuses a bad file), else bounded by
`task.max_train_samples`, else unknown; a hub split is never fetched to count it.

The time is an estimate, and printed as one. A training step costs about 6 FLOPs per encoder-
layer parameter per token (2 forward, 4 backward), tokens = `train.batch_size` ×
`task.max_seq_length` (an upper bound: batches are padded only to their longest text, and with
`train.group_by_length` to about their rows' own length, which the line then says), at this
machine's training throughput for every CPU thread a trial holds: `drydock plan` probes its
float32 matrix product on one thread (`probe_flops_per_thread`, half a second) and takes
`TRAINING_SHARE` of it, the share a training step reaches (`benchmarks/plan_calibration.py`).
With a constant in its place the quickstart's plan said 9-12 minutes on 2026-12-03, when the demo
took 24 m 46 s (benchmarks/RESULTS.md, "The 10-minute demo"; issue 36). A method that needs the teacher may run
it forward every step as well (2 FLOPs per teacher parameter per token): that is the upper end of
the range printed; methods that only borrow its layers (Theseus, `finetune` from the fine-tuned
teacher) cost the lower end. A method without a student depth of its own (CoFi's pruning) trains
the whole teacher. Left out: evaluations, checkpoints, export, latency measurement, Ray's start-up
and MiniLM's distillation on unlabeled text (its steps depend on that text). GPU trials get no
estimate: the one figure measured here is a CPU's.
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import SweepSpec, TaskConfig, TrainConfig, teacher_config

if TYPE_CHECKING:
    from methods.declaration import MethodParams

# One CPU thread's training throughput where nothing was probed (`drydock validate`, whose counts
# need no time): the MiniLM-sized step of benchmarks/RESULTS.md ("Training-loop overhead": 1,121 ms
# for batch 32 × 64 tokens on 2 threads; 6 layers of hidden 384, intermediate 1536, i.e. 10.65M
# layer parameters): 6 × 10.65M × 2,048 / 1.121 s / 2.
CPU_FLOPS_PER_THREAD = 5.8e10
# A MiniLM-sized training step's throughput per thread as a share of the probe's matrix product on
# one thread, measured on one machine in one run (benchmarks/plan_calibration.py; RESULTS.md,
# "The plan's time estimate"): 0.62 on one thread, 0.56 on two. The two-thread figure: the teacher
# runs on every CPU, and trials running side by side share the memory bandwidth.
TRAINING_SHARE = 0.56
PROBE_SIZE = 1024  # the probe's square float32 matrices

# The GLUE release's folder of each task (the layout `pipeline.prepare.glue_dir` reads; a test keeps
# the two equal). CoLA's train.tsv has no header row.
GLUE_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI",
                "qnli": "QNLI", "rte": "RTE"}
HEADERLESS = frozenset({"cola"})
SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class Rows:
    """The training rows one trial sees: `count`, or at most `count` (`at_most`), or unknown (None)."""

    count: int | None
    basis: str  # how it is known, as printed
    at_most: bool = False


@dataclass(frozen=True)
class MethodPlan:
    method: str
    configurations: int
    trials: int
    steps: int | None  # optimizer steps on the labeled data, one trial
    seconds: tuple[float, float] | None  # one trial's training, an estimate: low, high
    note: str = ""


@dataclass(frozen=True)
class SweepPlan:
    rows: Rows
    seeds: int
    methods: tuple[MethodPlan, ...]
    steps: int | None  # the loop's optimizer steps on the labeled data, one trial (None: rows unknown)
    steps_per_epoch: int | None
    epochs: float
    batch: str  # how one optimizer step's batch is made
    teacher_steps: int | None  # None: not fine-tuned (teacher.finetuned), or the rows are unknown
    teacher: str  # the teacher line, without its estimate
    teacher_seconds: float | None
    parallel: int | None  # trials at once on this machine; None: a cluster's own count
    cpus: int
    search: str = ""  # a searching algorithm's line (empty for the grid): which, its budget, what it aims at
    budget: int | None = None  # a searching algorithm's configurations in all; None: the grid's own count
    flops_per_thread: float = CPU_FLOPS_PER_THREAD  # the training throughput per CPU thread the estimate assumes
    probed: bool = False  # whether that is this machine's, probed (`drydock plan`), or the reference figure
    grouped: bool = False  # train.group_by_length: batches near their rows' own length, far below the bound counted

    @property
    def trials(self) -> int:
        return self.budget * self.seeds if self.budget is not None else sum(m.trials for m in self.methods)

    @property
    def configurations(self) -> int:
        return self.budget if self.budget is not None else sum(m.configurations for m in self.methods)

    @property
    def summary(self) -> str:
        """The clause `drydock validate` prints: `100 trials of 1,250 steps, teacher 500 steps`."""
        return plan_summary(self)

    def __str__(self) -> str:  # `print(drydock.plan(spec))` shows `drydock plan`'s table
        return format_plan(self)


# ----------------------------------------------------------------------------------------------
# training rows
# ----------------------------------------------------------------------------------------------


def count_rows(path: Path, fmt: str | None, header: bool = True) -> int | None:
    """Rows of a local data file, read the way the data stage reads it (tsv unquoted, line by
    line; csv with quoting, so a quoted newline stays in its row; blank lines skipped), without
    keeping any of it. None when it cannot be read: the data stage names that problem."""
    fmt = fmt or SUFFIX_FORMATS.get(path.suffix.lower())
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        if fmt == "csv":
            with path.open(encoding="utf-8-sig", newline="") as f:
                rows = sum(1 for row in csv.reader(f) if row)
        elif fmt == "tsv":
            with path.open("rb") as f:
                rows = sum(1 for line in f if line.strip(b"\r\n"))
        elif fmt == "jsonl":
            with path.open("rb") as f:
                return sum(1 for line in f if line.strip())
        else:
            return None
    except (OSError, UnicodeDecodeError, csv.Error, ValueError):
        return None
    return max(0, rows - 1) if header else rows


def glue_train_file(task: TaskConfig) -> Path | None:
    """`task.glue_dir`'s train.tsv: the GLUE root's task folder, or the task folder itself."""
    folder = GLUE_FOLDERS.get(task.name)
    if folder is None or not task.glue_dir:
        return None
    root = Path(task.glue_dir).expanduser()
    for candidate in (root / folder / "train.tsv", root / "train.tsv"):
        if candidate.is_file():
            return candidate
    return None


def train_rows(task: TaskConfig) -> Rows:
    """What the data stage will train on: the counted rows, subsampled to `max_train_samples`."""
    limit, source = task.max_train_samples, task.resolved_source()
    counted: int | None = None
    where = ""
    if source == "synthetic":
        counted, where = task.synthetic.num_train, "task.synthetic.num_train"
    elif source == "glue_dir":
        path = glue_train_file(task)
        counted = count_rows(path, "tsv", header=task.name not in HEADERLESS) if path else None
        where = str(path)
    elif source == "files" and task.files is not None:
        path = Path(task.files.train).expanduser()
        counted, where = count_rows(path, task.files.format), str(path)
    if counted is None:
        unread = "the hub split is not counted here" if source == "hub" else "the training file could not be read here"
        if limit:
            return Rows(limit, f"task.max_train_samples; {unread}", at_most=True)
        return Rows(None, f"unknown: {unread} and task.max_train_samples is not set")
    if limit and limit < counted:
        return Rows(limit, f"task.max_train_samples, of {counted:,} in {where}")
    return Rows(counted, where if source == "synthetic" else f"all of {where}")


# ----------------------------------------------------------------------------------------------
# the time estimate
# ----------------------------------------------------------------------------------------------


def layer_params(hidden: int, intermediate: int) -> int:
    """Weights and biases of one BERT layer: Q, K, V, O (4h² + 4h), the feed-forward
    (2hi + i + h) and two LayerNorms (4h). Embeddings are looked up, not multiplied."""
    return 4 * hidden * hidden + 2 * hidden * intermediate + 9 * hidden + intermediate


def teacher_shape(spec: SweepSpec) -> tuple[int, int, int] | None:
    """(layers, hidden, intermediate) of the teacher, when its config is on this machine."""
    found = teacher_config(spec.teacher)
    if found is None:
        return None
    config = found[0]
    arch = spec.teacher.architecture
    layers, hidden = config.get("num_hidden_layers"), config.get("hidden_size")
    if not isinstance(layers, int) or not isinstance(hidden, int):
        return None
    intermediate = config.get("intermediate_size") or (arch.intermediate_size if arch else 4 * hidden)
    return layers, hidden, int(intermediate)


def student_params(spec: SweepSpec, method_fields: set[str], params: MethodParams, teacher: tuple[int, int, int]) -> int:
    """Layer parameters of the student one configuration trains: its own depth and width, else
    the spec's `student`, else half the teacher (rounded up) and its width; a method without a
    depth of its own (pruning) trains the whole teacher."""
    depth, hidden, intermediate = teacher
    s = spec.student
    if not {"num_layers", "layers"} & method_fields:
        return depth * layer_params(hidden, intermediate)
    given = [getattr(params, "layers", None), getattr(params, "split", None), s.layers]
    counted = next((len(v) for v in given if isinstance(v, list | tuple) and v), None)
    layers = getattr(params, "num_layers", None) or counted or s.num_layers or (depth + 1) // 2
    width = getattr(params, "hidden_size", None) or s.hidden_size or hidden
    inner = getattr(params, "intermediate_size", None) or s.intermediate_size or (intermediate if width == hidden else 4 * width)
    return int(layers) * layer_params(int(width), int(inner))


def step_seconds(layer_parameters: int, tokens: int, threads: int, forward_only: bool = False,
                 flops_per_thread: float = CPU_FLOPS_PER_THREAD) -> float:
    return (2 if forward_only else 6) * layer_parameters * tokens / (flops_per_thread * max(1, threads))


def probe_matmul_flops(repeats: int = 7) -> float:
    """This machine's float32 matrix product on one thread, now: the median of `repeats` products
    of two PROBE_SIZE² matrices (numpy, its BLAS held to one thread). About half a second; a
    machine that is slower today, or busy, gets a longer estimate."""
    import statistics
    import time

    import numpy as np
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).standard_normal((PROBE_SIZE, PROBE_SIZE), dtype=np.float32)
    times = []
    with threadpool_limits(limits=1, user_api="blas"):
        a @ a  # the first product pays for the BLAS's own set-up
        for _ in range(repeats):
            start = time.perf_counter()
            a @ a
            times.append(time.perf_counter() - start)
    return 2 * PROBE_SIZE**3 / statistics.median(times)


def probe_flops_per_thread() -> float:
    """The training throughput per CPU thread the plan assumes on this machine."""
    return TRAINING_SHARE * probe_matmul_flops()


# ----------------------------------------------------------------------------------------------
# the plan
# ----------------------------------------------------------------------------------------------


def plan_sweep(spec: SweepSpec, cpus: int | None = None, flops_per_thread: float | None = None) -> SweepPlan:
    """The plan of a validated spec. `cpus`: this machine's (default: os.cpu_count());
    `flops_per_thread`: its training throughput per thread (`probe_flops_per_thread`; None: the
    reference figure, CPU_FLOPS_PER_THREAD, where no time is shown)."""
    from pipeline.training.steps import steps_per_epoch, total_steps

    flops = flops_per_thread or CPU_FLOPS_PER_THREAD

    cpus = cpus or os.cpu_count() or 1
    rows = train_rows(spec.task)
    r, train = spec.resources, spec.train
    steps = total_steps(train, rows.count) if rows.count else None
    threads = r.workers_per_trial * max(1, int(r.cpus_per_worker))  # torch's threads per worker (pipeline.search.worker)
    shape = None if r.use_gpu else teacher_shape(spec)
    methods = _method_plans(spec, steps, shape, train.batch_size * spec.task.max_seq_length, threads, flops)
    teacher_steps, teacher, teacher_seconds = _teacher_plan(spec, rows, shape, cpus if not r.teacher_on_workers() else threads, flops)
    on_cluster = bool(r.address or os.environ.get("RAY_ADDRESS"))
    fits = max(1, int(cpus // (r.workers_per_trial * r.cpus_per_worker)))
    parallel = None if on_cluster else min(fits, spec.search.max_concurrent_trials or fits)
    micro = max(1, train.batch_size // (r.workers_per_trial * train.grad_accumulation))  # as pipeline.training.loop splits it
    batch = (f"global batch {train.batch_size}: {r.workers_per_trial} worker(s) × micro-batch {micro} × "
             f"{train.grad_accumulation} accumulation")
    return SweepPlan(rows, len(spec.seeds), methods, steps, steps_per_epoch(rows.count, train.batch_size) if rows.count else None,
                     train.epochs, batch, teacher_steps, teacher, teacher_seconds, parallel, cpus, *_search_plan(spec),
                     flops_per_thread=flops, probed=flops_per_thread is not None, grouped=train.group_by_length)


def _search_plan(spec: SweepSpec) -> tuple[str, int | None]:
    search = spec.search
    if not search.searching:
        return "", None
    budget = search.num_configurations or 0
    limit = f"; no new configuration after {duration(search.time_budget)}" if search.time_budget else ""
    return (f"{search.algorithm} over {', '.join(spec.methods)}: {budget:,} configuration(s) in all, each once per seed, "
            f"aiming at {' and '.join(search.aims_at)}{limit}"), budget


def teacher_steps_config(spec: SweepSpec) -> TrainConfig:
    """The settings that decide the teacher's step count: `teacher.finetune`'s epochs, batch and
    step cap, which `pipeline.training.teacher.teacher_train_config` puts in place of the trial's
    (a test holds the two to the same count). That module is not imported here: it costs
    `drydock validate` 1.5 s of datasets and scipy imports."""
    f = spec.teacher.finetune
    return TrainConfig(epochs=f.epochs, max_steps=f.max_steps, batch_size=f.batch_size)


def _teacher_plan(spec: SweepSpec, rows: Rows, shape: tuple[int, int, int] | None,
                  threads: int, flops: float) -> tuple[int | None, str, float | None]:
    """The teacher's steps, its line and its estimate: fine-tuned with its own settings on the same rows,
    in the sweep's process (all of this machine's CPUs) or on a trial's workers."""
    from pipeline.training.steps import total_steps

    if spec.teacher.finetuned:
        return None, f"given (teacher.finetuned: {spec.teacher.finetuned}); not fine-tuned", None
    finetune = teacher_steps_config(spec)
    steps = total_steps(finetune, rows.count) if rows.count else None
    shown = f"{'at most ' if rows.at_most else ''}{steps:,}" if steps is not None else "unknown"
    cap = f", at most {finetune.max_steps:,}" if finetune.max_steps else ""
    line = (f"{shown} fine-tuning steps ({finetune.epochs:g} epoch(s), batch {finetune.batch_size}{cap}), "
            "unless the work directory has this teacher cached")
    if shape is None or steps is None:
        return steps, line, None
    tokens = finetune.batch_size * spec.task.max_seq_length
    return steps, line, steps * step_seconds(shape[0] * layer_params(*shape[1:]), tokens, threads, flops_per_thread=flops)


def _method_plans(spec: SweepSpec, steps: int | None, shape: tuple[int, int, int] | None, tokens: int,
                  threads: int, flops: float) -> tuple[MethodPlan, ...]:
    from methods import get_declaration
    from pipeline.search.space import expand_trials

    searching = spec.search.searching
    trials = [] if searching else expand_trials(spec)  # a study's configurations are not known before it runs
    counts = Counter(t.method for t in trials)
    plans = []
    for name in spec.methods:
        cls = get_declaration(name)
        mine = [t for t in trials if t.method == name]
        configs = {t.config_id: t.params for t in mine}
        if searching:  # one trial's estimate at the method's fixed values and defaults
            configs = {"fixed": cls.Params.model_validate(spec.methods[name].fixed())}
        seconds = None
        if shape and steps:
            fields = set(cls.Params.model_fields)
            teacher_forward = step_seconds(shape[0] * layer_params(*shape[1:]), tokens, threads, forward_only=True,
                                           flops_per_thread=flops)
            lows, highs = [], []
            for params in configs.values():
                low = step_seconds(student_params(spec, fields, params, shape), tokens, threads, flops_per_thread=flops)
                lows.append(low)
                highs.append(low + (teacher_forward if cls.needs_teacher(params) else 0.0))
            seconds = (steps * sum(lows) / len(lows), steps * sum(highs) / len(highs)) if lows else None
        note = "+ distillation on unlabeled text, not counted" if cls.uses_unlabeled_text else ""
        plans.append(MethodPlan(name, 0 if searching else len(configs), counts[name], steps, seconds, note))
    return tuple(plans)


# ----------------------------------------------------------------------------------------------
# the text
# ----------------------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    if seconds < 1:
        return "<1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def span(low: float, high: float) -> str:
    """`12-19 min` (one unit), `50 min-1.6 h` (two), or one figure when both print alike."""
    a, b = duration(low), duration(high)
    if a == b:
        return a
    (a_value, a_unit), b_unit = a.split(" "), b.split(" ")[1]
    return f"{a_value}-{b}" if a_unit == b_unit else f"{a}-{b}"


def plan_summary(plan: SweepPlan) -> str:
    """The plan in a clause of `drydock validate`'s one line: `100 trials of 1,250 steps, teacher 500 steps`."""
    at_most = "at most " if plan.rows.at_most else ""
    steps = f" of {at_most}{plan.steps:,} steps" if plan.steps is not None else " (steps unknown: the training rows are unknown)"
    tail = f", teacher {at_most}{plan.teacher_steps:,} steps" if plan.teacher_steps is not None else ""
    return f"{plan.trials:,} trial(s){steps}{tail}; `drydock plan` for the table and a time estimate"


def format_plan(plan: SweepPlan) -> str:
    """The plan as `drydock plan` prints it."""
    rows = plan.rows
    at_most = "at most " if rows.at_most else ""
    lines = ["plan (from the spec alone: nothing downloaded, no model loaded)",
             f"  data:     {at_most}{rows.count:,} training rows ({rows.basis})" if rows.count else f"  data:     {rows.basis}"]
    if plan.steps is not None:
        lines.append(f"  steps:    {at_most}{plan.steps:,} a trial: {plan.epochs:g} epoch(s) × {plan.steps_per_epoch:,} steps, "
                     f"{plan.batch}")
    else:
        lines.append(f"  steps:    unknown (the training rows are unknown); {plan.batch}")
    teacher_time = f"; ≈ {duration(plan.teacher_seconds)} (estimate)" if plan.teacher_seconds else ""
    lines.append(f"  teacher:  {plan.teacher}{teacher_time}")
    if plan.search:
        lines.append(f"  search:   {plan.search}")
    lines.append(f"  trials:   {plan.trials:,} ({plan.configurations:,} configuration(s) × {plan.seeds} seed(s))")
    width = max([len("method"), *(len(m.method) for m in plan.methods)])
    lines.append(f"    {'method':<{width}}  configurations  trials  steps/trial  time/trial (estimate)")
    for m in plan.methods:
        steps = f"{m.steps:,}" if m.steps is not None else "unknown"
        time = span(*m.seconds) if m.seconds else "-"
        configurations, trials = (f"{m.configurations:,}", f"{m.trials:,}") if plan.budget is None else ("searched", "-")
        lines.append(f"    {m.method:<{width}}  {configurations:>14}  {trials:>6}  {steps:>11}  {time}"
                     + (f"  ({m.note})" if m.note else ""))
    if plan.steps is not None:
        total = f"{plan.steps * plan.trials:,}"
        lines.append(f"    {'total':<{width}}  {plan.configurations:>14,}  {plan.trials:>6,}  {total:>11}")
    lines.append(f"  time:     {_time_line(plan)}")
    return "\n".join(lines)


def _time_line(plan: SweepPlan) -> str:
    if not plan.methods or any(m.seconds is None for m in plan.methods):
        return "no estimate (GPU trials, unknown training rows, or the teacher's config.json is not on this machine)"
    if plan.budget is not None:  # which methods the study picks is not known: the methods' mean trial
        low = plan.trials * sum(m.seconds[0] for m in plan.methods if m.seconds is not None) / len(plan.methods)
        high = plan.trials * sum(m.seconds[1] for m in plan.methods if m.seconds is not None) / len(plan.methods)
    else:
        low = sum(m.seconds[0] * m.trials for m in plan.methods if m.seconds is not None)
        high = sum(m.seconds[1] * m.trials for m in plan.methods if m.seconds is not None)
    rate = f"{plan.flops_per_thread / 1e9:.0f} GFLOP/s per CPU thread"
    rate = (f"{rate} ({TRAINING_SHARE:g} × this machine's float32 matrix product on one thread, probed now)" if plan.probed
            else f"{rate}, measured on a MiniLM-sized step")
    basis = f"6 FLOPs per parameter per token at {rate}; evaluation, export and latency measurement not included"
    if plan.grouped:  # the quickstart's SST-2 rows average 13 tokens of its 64 (benchmarks/RESULTS.md, "Grouping by length")
        basis += ("; every row counted at task.max_seq_length, while train.group_by_length pads a batch to about its "
                  "rows' own length: an upper bound (the quickstart's demo took about half of it)")
    teacher = plan.teacher_seconds or 0.0
    if plan.parallel is None:
        return (f"≈ {span(low + teacher, high + teacher)} of trial time in all, to divide by the trials the cluster runs at once "
                f"(an estimate: {basis})")
    return (f"≈ {span(teacher + low / plan.parallel, teacher + high / plan.parallel)} on this machine, {plan.parallel} trial(s) "
            f"at a time on its {plan.cpus} CPUs (an estimate: {basis})")
