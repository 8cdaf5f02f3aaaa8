"""Accuracy and latency of a teacher and its students in each deployment runtime, measured in one run.

    .venv/bin/python benchmarks/runtimes.py [--workdir runs --sweep quickstart] [--spec sweeps/quickstart.yaml]
        [--shapes 1x128,32x64] [--threads 2] [--max-eval N] [--json FILE]
    .venv/bin/python benchmarks/runtimes.py --teacher PATH --student NAME=PATH [--student NAME=PATH ...]

Issue 22, item 6: the alternative a user would pick for speed alone is the fine-tuned teacher
exported to ONNX and quantized to int8 (the "Optimum-style baseline"). This script builds every
runtime variant (`pipeline.measure.engines`: `torch` eager fp32, `onnxruntime` fp32,
`onnxruntime-int8` dynamic per-channel) of the teacher and of each student, checks each against
the folder's eager fp32 logits (`check_parity`, on the first 32 dev rows), scores each on the
task's dev set (read as the select stage reads it: `labelled_split(spec, "dev")`, tokenized by
the model folder's own tokenizer at `task.max_seq_length`), then times every model × runtime of
one shape interleaved in this one process (`pipeline.measure.interleaved.measure_interleaved`,
teacher included, `--threads` intra-op threads). Speedups are taken within rounds against the
teacher in eager fp32, in the same runtime, and in ONNX Runtime int8; every p50 and speedup has
its ~95% interval. Models of one architecture in one runtime are one measurement
(`architecture_key`): the others say which one they were `measured as`.

The select stage does the same for a sweep's timed students when `selection.runtimes` /
`selection.latency.shapes` ask for it (`pipeline.measure.job`, whose `tokenize`,
`out_folder` and `time_shape` this script uses), into variants.parquet; this script is for any
folders, with three references and the done-when line.

Students: the finished trials of `<workdir>/<sweep>/results.parquet` whose folder exists; the
teacher: the `teacher_path` their `drydock.json` records. `--teacher` and `--student` override.
GLUE data: `GLUE_DIR` when set, else the shared copy (`../shared/data/glue`) when it is there.
ONNX files go to `--out` (default `<workdir>/<sweep>/runtimes-bench/<model>/`) and are reused
while the model folder and the recipe are unchanged.

Prints a header (machine, versions, date, command), one row per model × runtime, and the issue's
done-when at 32 × 64: the best 3-layer student runtime's speedup over the teacher in eager fp32
(≥ 3×) and in ONNX Runtime int8 (≥ 1.5×), and its accuracy against the same student in fp32
(at most 1 point below it). Run it on an idle machine: ratios are only comparable within one run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED_GLUE = ROOT.parent / "shared" / "data" / "glue"
TEACHER = "teacher"
PARITY_ROWS = 32
EVAL_BATCH = 32
SPEEDUPS = (("vs_teacher_eager", "×eager"), ("vs_teacher_same_runtime", "×same"), ("vs_teacher_int8", "×int8"))
Log = Callable[[str], None]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("runs"))
    parser.add_argument("--sweep", default="quickstart", help="the sweep's name: <workdir>/<sweep>/results.parquet")
    parser.add_argument("--spec", type=Path, default=Path("sweeps/quickstart.yaml"), help="the task and its dev set")
    parser.add_argument("--teacher", type=Path, help="the teacher folder (default: the students' drydock.json teacher_path)")
    parser.add_argument("--student", action="append", default=[], metavar="NAME=PATH",
                        help="a student folder (repeatable; default: the sweep's finished students)")
    parser.add_argument("--shapes", default="1x128,32x64", help="batch x sequence length, comma-separated")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of every runtime")
    parser.add_argument("--max-eval", type=int, help="score on a seeded subsample of this many dev rows")
    parser.add_argument("--out", type=Path, help="for the ONNX files (default <workdir>/<sweep>/runtimes-bench)")
    parser.add_argument("--warmup", type=int, default=3, help="calls per runner before timing")
    parser.add_argument("--warm-passes", type=int, choices=range(4), default=1, help="untimed passes of a runner before each timed one")
    parser.add_argument("--min-rounds", type=int, default=10)
    parser.add_argument("--min-seconds", type=float, default=20.0, help="of interleaved rounds, per shape")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="per shape, settled or not")
    parser.add_argument("--summary-shape", default="32x64", help="the shape of the done-when line")
    parser.add_argument("--summary-layers", type=int, default=3, help="the student depth of the done-when line")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser.parse_args(argv)


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)[xX×](\d+)", part)
        if not match or min(int(match[1]), int(match[2])) < 1:
            raise SystemExit(f"--shapes: {part!r} is not BATCHxLENGTH (e.g. 32x64)")
        shapes.append((int(match[1]), int(match[2])))
    if not shapes:
        raise SystemExit("--shapes: no shape given")
    return shapes


def shape_label(shape: Sequence[int]) -> str:
    return f"{shape[0]}x{shape[1]}"


# ----------------------------------------------------------------------------------------------
# which models, which data
# ----------------------------------------------------------------------------------------------


@dataclass
class Model:
    name: str
    folder: Path
    role: str  # "teacher" or "student"
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def layers(self) -> int | None:
        value = self.config.get("num_hidden_layers", self.config.get("n_layers"))
        return int(value) if value is not None else None


def sweep_students(workdir: Path, sweep: str) -> dict[str, Path]:
    """trial_id → student folder, for the sweep's finished trials whose folder exists."""
    from pipeline.results import read_results

    path = workdir / sweep / "results.parquet"
    if not path.is_file():
        raise SystemExit(f"{path}: not found; pass --workdir/--sweep of a finished sweep, or --teacher and --student")
    frame = read_results(path)
    done = frame[(frame["status"] == "finished") & frame["student_path"].notna()]
    return {str(row.trial_id): Path(str(row.student_path)) for row in done.itertuples()
            if (Path(str(row.student_path)) / "config.json").is_file()}


def recorded_teacher(students: dict[str, Path]) -> Path:
    found = set()
    for folder in students.values():
        meta = folder / "drydock.json"
        if meta.is_file() and (path := json.loads(meta.read_text()).get("teacher_path")):
            found.add(str(path))
    if len(found) != 1:
        raise SystemExit(f"the students record {len(found)} teacher folders ({', '.join(sorted(found)) or 'none'}); pass --teacher")
    return Path(found.pop())


def find_models(args: argparse.Namespace) -> list[Model]:
    """The teacher first, then the students (explicit ones, else the sweep's), each with its config."""
    students: dict[str, Path] = {}
    for item in args.student:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--student {item!r}: expected NAME=PATH")
        students[name] = Path(path)
    if not students:
        students = sweep_students(args.workdir, args.sweep)
    if not students:
        raise SystemExit(f"no finished student with a folder in {args.workdir / args.sweep}; pass --student NAME=PATH")
    if TEACHER in students:
        raise SystemExit(f"--student: the name {TEACHER!r} is the teacher's; pick another")
    teacher = args.teacher or recorded_teacher(students)
    models = [Model(TEACHER, teacher, "teacher"), *(Model(n, p, "student") for n, p in students.items())]
    for model in models:
        if not (model.folder / "config.json").is_file():
            raise SystemExit(f"{model.name}: {model.folder} is not a saved model folder (no config.json)")
        model.config = json.loads((model.folder / "config.json").read_text())
    return models


@dataclass
class DevSet:
    rows: Any  # a datasets.Dataset: text_a[, text_b], label
    labels: np.ndarray
    metric_names: tuple[str, ...]
    primary: str
    regression: bool
    max_length: int
    description: str


def dev_set(spec_path: Path, max_eval: int | None) -> DevSet:
    """The dev rows as the select stage reads them (optionally subsampled, seeded)."""
    from pipeline.config import load_spec
    from pipeline.prepare.sources import subsample
    from pipeline.prepare.tasks import task_spec
    from pipeline.select.evaluate import labelled_split

    if "GLUE_DIR" not in os.environ and (SHARED_GLUE / "SST-2").is_dir():
        os.environ["GLUE_DIR"] = str(SHARED_GLUE)  # as the Makefile's demo target does
    if not spec_path.is_file() and (ROOT / spec_path).is_file():
        spec_path = ROOT / spec_path
    spec = load_spec(spec_path)
    task = task_spec(spec.task)
    full = labelled_split(spec, "dev")
    rows = subsample(full, max_eval, spec.task.sample_seed)
    description = (f"{task.name} dev, {len(rows)} rows (of {len(full)}), max_seq_length {spec.task.max_seq_length}, "
                   f"metric {task.primary_metric}")
    return DevSet(rows, np.asarray(rows["label"]), tuple(task.metrics), task.primary_metric, task.regression,
                  spec.task.max_seq_length, description)


def tokenize(folder: Path, dev: DevSet) -> tuple[list[dict[str, list[int]]], int]:
    """The dev rows tokenized by the folder's own tokenizer (truncated), and its pad id."""
    from pipeline.measure.job import tokenize as tokenize_rows

    text_b = list(dev.rows["text_b"]) if "text_b" in dev.rows.column_names else None
    return tokenize_rows(folder, list(dev.rows["text_a"]), text_b, dev.max_length)


# ----------------------------------------------------------------------------------------------
# variants: build, check, score
# ----------------------------------------------------------------------------------------------


@dataclass
class Entry:
    """One model in one runtime."""

    model: Model
    runtime: str
    variant: Any = None  # pipeline.measure.engines.Variant
    runner: Any = None  # pipeline.measure.engines.Runner
    metrics: dict[str, float] = field(default_factory=dict)
    logits: np.ndarray | None = None
    parity: float | None = None
    parity_error: str | None = None
    build_seconds: float = 0.0
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.model.name}/{self.runtime}"

    @property
    def config(self) -> dict[str, Any]:  # what `pipeline.measure.job.time_shape` keys the architecture by
        return self.model.config


def prepare_entry(entry: Entry, rows: list[dict[str, list[int]]], pad_id: int, dev: DevSet, out: Path, threads: int) -> None:
    """Build the variant, load it, check it against eager fp32, score it on the dev set."""
    from pipeline.errors import DrydockError
    from pipeline.measure.engines import check_parity, load_runner, pad_batch, predict_logits
    from pipeline.prepare.metrics import compute_metrics

    started = time.perf_counter()
    entry.variant = build_variant_of(entry, out, dev.max_length)
    entry.build_seconds = time.perf_counter() - started
    entry.runner = load_runner(entry.variant, threads)
    try:
        entry.parity = check_parity(entry.model.folder, entry.variant, pad_batch(rows[:PARITY_ROWS], pad_id), threads=threads)
    except DrydockError as e:
        entry.parity_error = str(e)
    entry.logits = predict_logits(entry.runner, rows, EVAL_BATCH, pad_id)
    entry.metrics = compute_metrics(list(dev.metric_names), entry.logits, dev.labels, dev.regression)


def build_variant_of(entry: Entry, out: Path, max_length: int):
    from pipeline.measure.engines import build_variant
    from pipeline.measure.job import out_folder

    return build_variant(entry.model.folder, entry.runtime, out_folder(out, entry.model.name), seq_length_hint=max_length)


def prepare_all(models: list[Model], dev: DevSet, out: Path, threads: int, log: Log) -> list[Entry]:
    """Every model in every runtime; a student variant that fails is kept with its error (not
    timed), a teacher variant that fails stops the run (every speedup needs it)."""
    from pipeline.measure.runtimes import CPU_RUNTIMES as RUNTIMES  # the benchmark compares the CPU runtimes

    entries = []
    for model in models:
        rows, pad_id = tokenize(model.folder, dev)
        for runtime in RUNTIMES:
            entry = Entry(model, runtime)
            try:
                prepare_entry(entry, rows, pad_id, dev, out, threads)
            except Exception as e:
                if model.role == TEACHER:
                    raise
                entry.error = f"{type(e).__name__}: {e}"[:300]
            entries.append(entry)
            state = entry.error or (f"{dev.primary} {entry.metrics.get(dev.primary, float('nan')):.4f}, "
                                    f"{entry.variant.size_bytes / 1e6:.1f} MB, parity "
                                    f"{'FAIL' if entry.parity_error else f'{entry.parity:.2g}'}, built in {entry.build_seconds:.1f} s")
            log(f"{entry.name}: {state}")
    return entries


# ----------------------------------------------------------------------------------------------
# latency
# ----------------------------------------------------------------------------------------------


def references() -> list[str]:
    from pipeline.measure.runtimes import CPU_RUNTIMES as RUNTIMES  # the benchmark compares the CPU runtimes

    return [f"{TEACHER}/{runtime}" for runtime in RUNTIMES]


def time_shape(entries: list[Entry], shape: tuple[int, int], settings: Any, log: Log):
    """Every built entry at this shape, one timing per architecture and runtime, interleaved, in
    this process (`pipeline.measure.job.time_shape`, as the select stage times them)."""
    from pipeline.measure.job import time_shape as time_entries

    return time_entries(entries, shape, references(), settings, log)


# ----------------------------------------------------------------------------------------------
# figures
# ----------------------------------------------------------------------------------------------


def latency_record(entry: Entry, result: Any) -> dict[str, Any]:
    timing = result.timings.get(entry.name)
    if timing is None:
        return {"error": entry.error or result.errors.get(entry.name, "not timed")}
    speedups = result.speedups[entry.name]
    wanted = {"vs_teacher_eager": f"{TEACHER}/torch", "vs_teacher_same_runtime": f"{TEACHER}/{entry.runtime}",
              "vs_teacher_int8": f"{TEACHER}/onnxruntime-int8"}
    record = {k: getattr(timing, k) for k in ("p50_ms", "p90_ms", "low_ms", "high_ms", "rounds", "measured_as")}
    for key, ref in wanted.items():
        record[f"speedup_{key}"] = speedups[ref].model_dump() if ref in speedups else None
    return record


def entry_record(entry: Entry, fp32: Entry | None, dev: DevSet, results: dict[str, Any]) -> dict[str, Any]:
    metric = entry.metrics.get(dev.primary)
    base = fp32.metrics.get(dev.primary) if fp32 is not None else None
    dev_diff = None
    if entry.logits is not None and fp32 is not None and fp32.logits is not None:
        dev_diff = float(np.max(np.abs(entry.logits - fp32.logits))) if entry.logits.size else 0.0
    return {
        "model": entry.model.name, "role": entry.model.role, "layers": entry.model.layers, "runtime": entry.runtime,
        "source": str(entry.model.folder), "path": str(entry.variant.path) if entry.variant else None,
        "size_bytes": entry.variant.size_bytes if entry.variant else None,
        "metric_name": dev.primary, "metric": metric, "metrics": entry.metrics,
        "metric_delta_vs_fp32": metric - base if metric is not None and base is not None else None,
        "parity_max_abs_diff": entry.parity, "parity_ok": entry.error is None and entry.parity_error is None,
        "parity_error": entry.parity_error, "dev_max_abs_logit_diff_vs_fp32": dev_diff, "error": entry.error,
        "build_seconds": round(entry.build_seconds, 2),
        "latency": {label: latency_record(entry, result) for label, result in results.items()},
    }


def accuracy_kept(delta: float | None) -> bool:
    """Within 1 point of the same student in fp32, read as: at most 1 point below it (a variant
    that scores higher has lost nothing; on a small dev set int8 moves either way)."""
    return delta is not None and delta * 100 >= -1.0


def done_when(records: list[dict[str, Any]], label: str, layers: int) -> dict[str, Any]:
    """The issue's done-when: the best `layers`-layer student runtime at `label` (the fastest over
    the teacher in eager fp32 among those that keep the accuracy, `accuracy_kept`; the fastest of
    all when none does)."""
    def speedup(r: dict[str, Any], key: str) -> dict[str, float] | None:
        return r["latency"].get(label, {}).get(f"speedup_{key}")

    timed = [r for r in records if r["role"] == "student" and r["layers"] == layers and speedup(r, "vs_teacher_eager")]
    if not timed:
        return {"shape": label, "layers": layers, "found": False}
    within = [r for r in timed if accuracy_kept(r["metric_delta_vs_fp32"])]
    best = max(within or timed, key=lambda r: speedup(r, "vs_teacher_eager")["median"])  # type: ignore[index]
    eager, int8 = speedup(best, "vs_teacher_eager"), speedup(best, "vs_teacher_int8")
    delta = best["metric_delta_vs_fp32"]
    return {
        "shape": label, "layers": layers, "found": True, "model": best["model"], "runtime": best["runtime"],
        "speedup_vs_teacher_eager": eager, "speedup_vs_teacher_int8": int8, "metric_delta_points": None if delta is None else delta * 100,
        "pass_eager": eager is not None and eager["median"] >= 3.0, "pass_int8": int8 is not None and int8["median"] >= 1.5,
        "pass_accuracy": accuracy_kept(delta),
    }


# ----------------------------------------------------------------------------------------------
# printing
# ----------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import onnxruntime
    import torch
    import transformers

    from pipeline.measure.latency import cpu_name

    return {
        "cpu": cpu_name(), "cpus": os.cpu_count(), "hostname": platform.node(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(), "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
        "transformers": transformers.__version__,
    }


def _ratio(s: dict[str, float] | None) -> str:
    return "-" if not s else f"{s['median']:.2f} [{s['low']:.2f}-{s['high']:.2f}]"


def _p50(latency: dict[str, Any]) -> str:
    if "p50_ms" not in latency:
        return "-"
    text = f"{latency['p50_ms']:.2f} [{latency['low_ms']:.2f}-{latency['high_ms']:.2f}]"
    measured_as = latency.get("measured_as")
    return f"{text} (as {measured_as.rsplit('/', 1)[0]})" if measured_as else text


def table(records: list[dict[str, Any]], labels: list[str], metric: str) -> str:
    head = ["model", "runtime", metric, "Δ pts", "size MB", "parity", *(f"{lab} {col}" for lab in labels
            for col in ("p50 ms [95%]", *(c for _, c in SPEEDUPS)))]
    lines, notes = [head], []
    for r in records:
        name = f"{r['model']}/{r['runtime']}"
        delta = r["metric_delta_vs_fp32"]
        parity = "FAIL" if r["parity_error"] else ("-" if r["parity_max_abs_diff"] is None else f"{r['parity_max_abs_diff']:.1e}")
        cells = [r["model"], r["runtime"], "-" if r["metric"] is None else f"{r['metric']:.4f}",
                 "-" if delta is None else f"{delta * 100:+.2f}", "-" if r["size_bytes"] is None else f"{r['size_bytes'] / 1e6:.1f}", parity]
        for lab in labels:
            lat = r["latency"].get(lab, {})
            cells += [_p50(lat), *(_ratio(lat.get(f"speedup_{key}")) for key, _ in SPEEDUPS)]
        lines.append(cells)
        if r["error"]:
            notes.append(f"{name}: failed: {r['error']}")
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text + [f"  {n}" for n in notes])


def summary_line(s: dict[str, Any]) -> str:
    if not s["found"]:
        return f"done-when at {s['shape']}: no {s['layers']}-layer student was timed at this shape"

    def mark(ok: bool) -> str:
        return "yes" if ok else "NO"

    delta = s["metric_delta_points"]
    return (f"done-when at {s['shape']}: best {s['layers']}-layer student runtime {s['model']}/{s['runtime']}: "
            f"{_ratio(s['speedup_vs_teacher_eager'])}× vs teacher eager fp32 (need ≥3×: {mark(s['pass_eager'])}), "
            f"{_ratio(s['speedup_vs_teacher_int8'])}× vs teacher ORT int8 (need ≥1.5×: {mark(s['pass_int8'])}), "
            f"{'-' if delta is None else f'{delta:+.2f}'} accuracy points vs the same student in fp32 "
            f"(need at most 1 below: {mark(s['pass_accuracy'])})")


def header(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"drydock runtimes benchmark, {m['date']}",
        f"machine: {m['cpu']}, {m['cpus']} CPUs, load average {' '.join(map(str, m['load_average']))} at the start; "
        f"{report['threads']} intra-op thread(s) per runtime",
        f"versions: torch {m['torch']}, onnxruntime {m['onnxruntime']}, transformers {m['transformers']}, python {m['python']}",
        f"command: {report['command']}",
        f"dev set: {report['dev_set']}",
    ]
    for label, run in report["measurements"].items():
        unsettled = run["unsettled"]
        more = f", +{len(unsettled) - 4} more" if len(unsettled) > 4 else ""
        state = "settled" if run["stable"] else f"NOT settled ({', '.join(unsettled[:4])}{more})"
        lines.append(f"latency {label}: {run['runners']} runner(s) interleaved, {run['rounds']} rounds in {run['seconds']:.1f} s, {state}")
    lines.append("p50 ms [~95% interval of the median]; speedups: median of within-round ratios [interval] over the teacher in "
                 "eager fp32 (×eager), in the same runtime (×same), in ONNX Runtime int8 (×int8); Δ pts: metric minus the same "
                 "model's in eager fp32, ×100; parity: max |logit - eager fp32 logit| on the first 32 dev rows; (as X): the same "
                 "architecture in the same runtime, timed once, as model X")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def command_line(argv: Sequence[str]) -> str:
    script = os.path.relpath(__file__) if not os.path.relpath(__file__).startswith("..") else __file__
    glue = f"GLUE_DIR={shlex.quote(os.environ['GLUE_DIR'])} " if os.environ.get("GLUE_DIR") else ""
    return glue + shlex.join([os.path.relpath(sys.executable), script, *argv])


def main(argv: Sequence[str] | None = None, log: Log | None = None) -> dict[str, Any]:
    import torch
    from transformers.utils import logging as hf_logging

    from pipeline.measure.interleaved import InterleaveSettings
    from pipeline.measure.runtimes import EAGER

    hf_logging.disable_progress_bar()  # a "Loading weights" bar per model load, on every variant
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    shapes = parse_shapes(args.shapes)
    settings = InterleaveSettings(warmup=args.warmup, warm_passes=args.warm_passes, min_rounds=args.min_rounds,
                                  min_seconds=args.min_seconds, max_seconds=max(args.max_seconds, args.min_seconds))
    models = find_models(args)
    dev = dev_set(args.spec, args.max_eval)
    command = command_line(argv)  # after dev_set: GLUE_DIR as it was used
    torch.set_num_threads(args.threads)
    started = machine()
    entries = prepare_all(models, dev, args.out or args.workdir / args.sweep / "runtimes-bench", args.threads, log)
    results = {shape_label(shape): time_shape(entries, shape, settings, log) for shape in shapes}
    fp32 = {e.model.name: e for e in entries if e.runtime == EAGER and e.error is None}
    records = [entry_record(e, fp32.get(e.model.name), dev, results) for e in entries]
    summary_shape = args.summary_shape if args.summary_shape in results else shape_label(shapes[-1])
    report = {
        "machine": started, "threads": args.threads, "command": command, "dev_set": dev.description,
        "settings": settings.model_dump(), "shapes": list(results),
        "measurements": {label: {"runners": len(r.round_times_ms), "rounds": r.rounds, "seconds": r.seconds, "stable": r.stable,
                                 "unsettled": r.unsettled, "errors": r.errors} for label, r in results.items()},
        "rows": records, "summary": done_when(records, summary_shape, args.summary_layers),
    }
    print(header(report), table(records, list(results), dev.primary), summary_line(report["summary"]), sep="\n\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return report


if __name__ == "__main__":
    main()
