"""`drydock` — the command line.

    drydock validate SPEC [--set k=v ...]          check a spec without running anything
    drydock methods                                 list registered methods and their parameters
    drydock train SPEC --method NAME --output DIR   run one configuration in-process
    drydock sweep SPEC [--workdir DIR] [--resume] [--address ADDR]   the whole search on Ray
    drydock retrain SPEC [--workdir DIR] [--address ADDR]           for schedulers: only when inputs changed
    drydock report WORKDIR/SWEEP                    rebuild report.md/html and pareto.png from results
    drydock registry list NAME / drydock promote NAME VERSION       the MLflow registry and its champion
    drydock eval MODEL SPEC [--split dev|test]      score a student folder or models:/NAME@champion

A user mistake (bad spec, missing data, unknown label) prints one line per problem and exits 2,
with no traceback; exit 1 means the run itself failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.cli import outputs
from pipeline.errors import DrydockError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="sweep spec (YAML)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec field, e.g. --set train.epochs=1 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="drydock", description="Compress BERT-family encoders for downstream tasks.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a spec; exit 0 if valid, 2 with one line per problem")
    _add_spec_args(p)

    sub.add_parser("methods", help="list the registered methods with their parameters and defaults")

    p = sub.add_parser("train", help="run one configuration of one method in this process")
    _add_spec_args(p)
    p.add_argument("--method", required=True, help="registered method name")
    p.add_argument("--output", required=True, type=Path, help="folder for metrics.json and student/")
    p.add_argument("--workdir", type=Path, default=None, help="cache folder (default: runs/ in the current directory)")
    p.add_argument("--seed", type=int, default=None, help="default: the spec's first seed")

    p = sub.add_parser("sweep", help="prepare → teacher → search on Ray; prints the trial table")
    _add_spec_args(p)
    p.add_argument("--workdir", type=Path, default=Path("runs"), help="work directory (default: runs/)")
    p.add_argument("--resume", action="store_true", help="continue the last run of this sweep")
    p.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or a local instance)")

    p = sub.add_parser("retrain", help="re-run the sweep only if the spec, data or teacher changed (for schedulers)")
    _add_spec_args(p)
    p.add_argument("--workdir", type=Path, default=Path("runs"), help="work directory (default: runs/)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or a local instance)")
    outputs.add_commands(sub)
    return parser


def cmd_retrain(args: argparse.Namespace) -> int:
    from pipeline.config import load_spec
    from pipeline.retrain import run_cli

    return run_cli(load_spec(args.spec, args.overrides), args.workdir, args.address)


def cmd_sweep(args: argparse.Namespace) -> int:
    from pipeline.cli.tables import summary_table
    from pipeline.config import load_spec
    from pipeline.sweep import run_sweep

    spec = load_spec(args.spec, args.overrides)
    frame = run_sweep(spec, args.workdir, resume=args.resume, address=args.address)
    from pipeline.select.report import PARETO_PNG, REPORT_MD, pareto_table_text

    print(summary_table(frame))
    print(pareto_table_text(frame, spec.selection))
    sweep_dir = args.workdir / spec.name
    print(f"results: {sweep_dir / 'results.parquet'}\nreport:  {sweep_dir / REPORT_MD}\nplot:    {sweep_dir / PARETO_PNG}")
    failed = int((frame["status"] == "failed").sum()) if len(frame) else 0
    if failed:
        print(f"{failed} trial(s) failed; see the error column", file=sys.stderr)
    return EXIT_OK if len(frame) and failed < len(frame) else EXIT_FAILED


def cmd_validate(args: argparse.Namespace) -> int:
    from pipeline.config import load_deepspeed_preset, load_spec

    spec = load_spec(args.spec, args.overrides)
    load_deepspeed_preset(spec)  # the one file a spec names that only this machine can check; a sweep reads it too
    print(f"{args.spec}: valid (sweep {spec.name!r}, task {spec.task.name}, methods: {', '.join(spec.methods) or 'none'})")
    return EXIT_OK


def cmd_methods(args: argparse.Namespace) -> int:
    from methods import get_method, registered_methods

    for name in registered_methods():
        cls = get_method(name)
        print(f"{name}: {cls.summary}")
        for field, info in cls.Params.model_fields.items():
            default = info.get_default(call_default_factory=True)
            desc = f"  — {info.description}" if info.description else ""
            print(f"    {field} = {'null' if default is None else repr(default)}{desc}")
    return EXIT_OK


def cmd_train(args: argparse.Namespace) -> int:
    from pipeline.config import load_spec
    from pipeline.training.trial import resolve_params, run_trial, verify_trial

    spec = load_spec(args.spec, args.overrides)
    from methods import registered_methods

    if args.method not in registered_methods():
        raise DrydockError(f"--method: unknown method {args.method!r} (registered: {', '.join(registered_methods())})")
    params = resolve_params(spec, args.method)
    workdir = args.workdir or Path("runs")
    seed = spec.seeds[0] if args.seed is None else args.seed
    outcome = run_trial(spec, args.method, params, seed, workdir, args.output)
    outcome.metrics["export_max_abs_diff"] = verify_trial(args.output)  # counts only once it reloads alone
    m = outcome.metrics
    teacher = f", teacher {m['teacher_metric']:.4f}" if m.get("teacher_metric") is not None else ""
    print(
        f"{args.method}: {m['metric_name']} {m['metric']:.4f}{teacher}; {m['num_params_encoder']:,} encoder parameters; "
        f"{m['steps']} steps in {m['train_seconds']:.1f}s → {args.output / 'student'}"
    )
    return EXIT_OK


COMMANDS = {"validate": cmd_validate, "methods": cmd_methods, "train": cmd_train, "sweep": cmd_sweep, "retrain": cmd_retrain, **outputs.COMMANDS}


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except DrydockError as e:
        for problem in e.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
