"""The select stage's variants step on a finished sweep, for comparing an idle run with a loaded one.

    GLUE_DIR=../shared/data/glue .venv/bin/python benchmarks/select_load.py [--workdir runs --sweep quickstart]
        [--runtimes torch,onnxruntime-int8] [--shapes 32x64] [--min-seconds 2] [--threads N] [--warm-passes 1] [--out DIR] [--json FILE]

Issue 22's second done-when: in a select stage run while the test suite runs beside it, the
teacher/student speedup of a 3-layer student stays within 10% of the same stage run on the idle
machine. This runs exactly the stage's step (`pipeline.select.stage.variants_step`, in
this process as without Ray: every model × runtime of a shape interleaved, ratios within rounds)
on the sweep's finished students and the teacher their `drydock.json` names, with the spec the
sweep's newest run saved (`runs/<run id>/spec.json`), `selection.runtimes` and
`selection.latency.shapes` replaced by the arguments. It prints, per student variant, the
speedup over the teacher in eager fp32 with its interval, and the p50s.

Run it once idle and once beside `make test`; the two `speedup` columns are the done-when's
figures. ONNX files are kept in `--out` (default `<workdir>/<sweep>/select-load/`) and reused
while the model folders are unchanged, so the two runs time the same files.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_GLUE = ROOT.parent / "shared" / "data" / "glue"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs")
    parser.add_argument("--sweep", default="quickstart")
    parser.add_argument("--runtimes", default="torch,onnxruntime-int8")
    parser.add_argument("--shapes", default="32x64")
    parser.add_argument("--min-seconds", type=float, default=None, help="timing window per shape (default: the spec's)")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads per runner (default: the spec's)")
    parser.add_argument("--warm-passes", type=int, choices=range(4), default=None,
                        help="untimed passes before each timed one (default: the stage's, 1; 0: timed in the state "
                             "the previous runner left)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--json", default=None, help="also write the variants table's rows here")
    args = parser.parse_args(argv)
    if "GLUE_DIR" not in os.environ and SHARED_GLUE.is_dir():
        os.environ["GLUE_DIR"] = str(SHARED_GLUE)

    import pandas as pd

    from pipeline import results as results_table
    from pipeline.config import SweepSpec
    from pipeline.select.report import current_run_dir
    from pipeline.select.stage import variants_step

    sweep_dir = Path(args.workdir) / args.sweep
    run_dir = current_run_dir(sweep_dir)
    if run_dir is None or not (run_dir / "spec.json").is_file():
        print(f"{sweep_dir}: state.json names no run with a saved spec.json", file=sys.stderr)
        return 2
    spec = SweepSpec.model_validate(json.loads((run_dir / "spec.json").read_text()))
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    latency = spec.selection.latency.model_dump()
    batch, _, length = shapes[0].partition("x")  # the front shape, and the single-shape fields with it
    latency.update({"shapes": shapes, "front_shape": shapes[0], "batch_size": int(batch), "seq_length": int(length)})
    if args.min_seconds is not None:
        latency["min_seconds"] = args.min_seconds
    if args.threads is not None:
        latency["threads"] = args.threads
    selection = spec.selection.model_copy(update={"runtimes": args.runtimes.split(",")})
    selection = type(selection).model_validate({**selection.model_dump(), "latency": latency})
    spec = spec.model_copy(update={"selection": selection})

    frame = results_table.read_results(sweep_dir / results_table.RESULTS_FILE)
    finished = frame[(frame["status"] == "finished") & frame["student_path"].notna()]
    students = {str(r.trial_id): Path(str(r.student_path)) for r in finished.itertuples()}
    students = {t: p for t, p in students.items() if (p / "config.json").is_file()}
    teachers = {json.loads((p / "drydock.json").read_text()).get("teacher_path") for p in students.values()}
    if len(teachers) != 1 or None in teachers:
        print(f"students name {len(teachers)} teacher folders ({teachers}); expected one", file=sys.stderr)
        return 2
    teacher = Path(str(teachers.pop()))
    out = Path(args.out) if args.out else sweep_dir / "select-load"

    load = os.getloadavg()
    print(f"# select stage variants step, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} / {load[1]:.2f}")
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}")
    started = time.perf_counter()
    overrides = {"warm_passes": args.warm_passes} if args.warm_passes is not None else None
    step = variants_step(spec, students, teacher, out, log=lambda line: print(f"  {line}", flush=True), interleave=overrides)
    table = step.table if step is not None else None
    if table is None:
        print("the step built no table (see the log above)", file=sys.stderr)
        return 1
    took = time.perf_counter() - started
    layers = {t: json.loads((p / "config.json").read_text()).get("num_hidden_layers") for t, p in students.items()}
    print(f"# {took:.0f} s; load average after {os.getloadavg()[0]:.2f}")
    shown = table[["trial_id", "runtime", "metric", "latency_ms", "latency_low_ms", "latency_high_ms",
                   "speedup", "speedup_low", "speedup_high", "speedup_same_runtime", "measured_as"]].copy()
    shown.insert(1, "layers", [layers.get(str(t), 6 if t == "teacher" else None) for t in shown["trial_id"]])
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.json:
        Path(args.json).write_text(shown.to_json(orient="records", indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
