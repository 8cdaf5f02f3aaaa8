"""`drydock` — the command line.

    drydock validate SPEC [--set k=v ...]          check a spec without running anything (and count its trials and steps)
    drydock plan SPEC [--set k=v ...]              validate, then the plan: trials per method, steps, a time estimate
    drydock methods                                 list registered methods and their parameters
    drydock train SPEC --method NAME --output DIR [--replace]   run one configuration in-process
    drydock sweep SPEC [--workdir DIR] [--resume] [--address ADDR]   the whole search on Ray
    drydock retrain SPEC [--workdir DIR] [--address ADDR]           for schedulers: only when inputs changed
    drydock report WORKDIR/SWEEP                    rebuild report.md/html and pareto.png from results
    drydock registry list NAME / drydock promote NAME VERSION       the MLflow registry and its champion
    drydock eval MODEL SPEC [--split dev|test]      score a student folder or models:/NAME@champion
    drydock --version                               the installed distribution's version

Each command calls one function of drydock's Python API (the `drydock` package) and prints what it
returns; a `DrydockError` it raises is printed as `error: …` lines and exits with its `exit_code`.

Exit codes: 0 success; 1 the run itself failed, or another run of the spec holds its lock
(`drydock.SweepLocked`); 130 interrupted (`--resume` continues); 2 a user mistake (bad spec, missing data, unknown
label, an --output folder that is not empty), one line per problem and no traceback; 3 the MLflow
tracking server is unreachable (no answer, a refused connection, a gateway's 502/503/504 at the
first call: said within seconds, before any work; `pipeline.tracking.TrackingUnreachable`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.cli import logs, outputs
from pipeline.errors import EXIT_FAILED as EXIT_FAILED
from pipeline.errors import EXIT_UNREACHABLE as EXIT_UNREACHABLE
from pipeline.errors import EXIT_USAGE as EXIT_USAGE
from pipeline.errors import DrydockError

EXIT_OK = 0
DISTRIBUTION = "drydock"  # pyproject.toml's [project] name: what `--version` reports


def installed_version() -> str:
    """The installed distribution's version, as pip sees it (a source tree run without
    installing has none to report, and says so instead of inventing one)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


def _add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="sweep spec (YAML)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec field, e.g. --set train.epochs=1 (repeatable)")


def _add_verbosity_args(p: argparse.ArgumentParser, default: int | str) -> None:
    """-v/-q, before the command or after it (`drydock -q sweep s.yaml`, `drydock sweep s.yaml -q`):
    a subcommand's default is SUPPRESS, so that leaving them out there keeps the top level's."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=logs.VERBOSE, default=default,
                       help="debug lines too, and Ray's and MLflow's INFO lines")
    group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=logs.QUIET, default=default,
                       help="only warnings and errors (and the command's result); no progress display")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="drydock", description="Compress BERT-family encoders for downstream tasks.")
    _add_verbosity_args(parser, logs.NORMAL)
    parser.add_argument("--version", action="version", version=f"drydock {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a spec; exit 0 if valid (with its trial and step counts), 2 with one line per problem")
    _add_spec_args(p)
    p = sub.add_parser("plan", help="what a sweep of the spec would run: trials, steps and a time estimate (validates it too)")
    _add_spec_args(p)

    sub.add_parser("methods", help="list the registered methods with their parameters and defaults")

    p = sub.add_parser("train", help="run one configuration of one method in this process")
    _add_spec_args(p)
    p.add_argument("--method", required=True, help="registered method name")
    p.add_argument("--output", required=True, type=Path, help="folder for metrics.json and student/ (new or empty)")
    p.add_argument("--replace", action="store_true", help="empty a --output folder that is not empty first")
    p.add_argument("--workdir", type=Path, default=None, help="cache folder (default: runs/ in the current directory)")
    p.add_argument("--seed", type=int, default=None, help="default: the spec's first seed")

    p = sub.add_parser("sweep", help="prepare → teacher → search on Ray → select: measures the students' latency, "
                       "reports the Pareto front and registers it in MLflow with a champion alias; prints the trials and the front",
                       description="The whole job: tokenize the task's data (cached), fine-tune the teacher (cached), search "
                       "the spec's methods on Ray (one Ray Train run per trial, each tracked in MLflow), then select: export "
                       "every finished student, measure its latency in the spec's runtimes, report the accuracy/latency "
                       "Pareto front (report.md/html, pareto.png) and register the front in the MLflow model registry, "
                       "moving the `champion` alias only on improvement.")
    _add_spec_args(p)
    p.add_argument("--workdir", default="runs", help="work directory: a folder, or a URI every node reaches "
                   "(s3://bucket/prefix, gs://…, file:///…; no shared filesystem needed) (default: runs/)")
    p.add_argument("--resume", action="store_true", help="continue the last run of this sweep")
    p.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or a local instance)")

    p = sub.add_parser("retrain", help="re-run the sweep only if the spec, data or teacher changed (for schedulers)")
    _add_spec_args(p)
    p.add_argument("--workdir", default="runs", help="work directory: a folder or a URI, as for sweep (default: runs/)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or a local instance)")
    outputs.add_commands(sub)
    for command in sub.choices.values():
        _add_verbosity_args(command, argparse.SUPPRESS)
    return parser


def cmd_retrain(args: argparse.Namespace) -> int:
    """Exit codes a scheduler acts on (`pipeline.retrain`): 0 done or nothing to do, 2 a mistake to
    fix, 1 failed or skipped (another run holds the spec's lock); one summary line on stdout."""
    import drydock

    spec = drydock.load_spec(args.spec, args.overrides)
    try:
        print(drydock.retrain(spec, args.workdir, address=args.address).summary)
    except drydock.SweepLocked as e:
        print(e)
        return EXIT_FAILED
    except DrydockError:
        raise  # exit 2, printed by main
    except Exception as e:
        print(f"drydock retrain {spec.name}: failed: {type(e).__name__}: {e}")
        return EXIT_FAILED
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    """`drydock.sweep` (the spec's lock, the hub commits resolved once inside it, the stages),
    then the trial table, the front and where everything is."""
    import drydock
    from pipeline.storage import WorkStore

    spec = drydock.load_spec(args.spec, args.overrides)
    result = drydock.sweep(spec, args.workdir, resume=args.resume, address=args.address)
    from pipeline.cli.tables import summary_table

    print(summary_table(result.results))
    print(result.front_table)
    if result.runtimes_table:
        print(result.runtimes_table)
    print(outputs.where_to_look(spec, WorkStore.open(args.workdir), champion=lambda uri, name: result.champion_version))
    if result.failed:
        print(f"{result.failed} trial(s) failed; see the error column", file=sys.stderr)
    return EXIT_OK if len(result.results) and result.failed < len(result.results) else EXIT_FAILED


def cmd_validate(args: argparse.Namespace) -> int:
    """`drydock.validate`: one line (scripts read it: benchmarks/gpu_smoke.sh); `plan` adds the table."""
    import drydock

    check = drydock.plan if args.command == "plan" else drydock.validate  # plan probes this machine's speed
    plan = check(args.spec, args.overrides)  # every problem, the schema's and the rest's, in one pass
    spec = drydock.load_spec(args.spec, args.overrides)
    print(f"{args.spec}: valid (sweep {spec.name!r}, task {spec.task.name}, methods: {', '.join(spec.methods)}; {plan.summary})")
    if args.command == "plan":
        print(plan)
    return EXIT_OK


def cmd_methods(args: argparse.Namespace) -> int:
    import drydock

    for name, info in drydock.methods().items():
        print(f"{name}: {info.summary}")
        for field, param in info.params.items():
            desc = f"  — {param.description}" if param.description else ""
            print(f"    {field} = {'null' if param.default is None else repr(param.default)}{desc}")
    return EXIT_OK


def cmd_train(args: argparse.Namespace) -> int:
    import drydock

    result = drydock.train(args.spec, args.method, args.output, overrides=args.overrides, workdir=args.workdir or Path("runs"),
                           seed=args.seed, replace=args.replace)
    m = result.metrics
    teacher = f", teacher {m['teacher_metric']:.4f}" if m.get("teacher_metric") is not None else ""
    print(
        f"{args.method}: {m['metric_name']} {m['metric']:.4f}{teacher}; {m['num_params_encoder']:,} encoder parameters; "
        f"{m['steps']} steps in {m['train_seconds']:.1f}s → {result.student}"
    )
    return EXIT_OK


# Commands that can run for minutes: a log gets the watchdog's line when they go silent (pipeline.cli.logs).
LONG_COMMANDS = ("sweep", "retrain", "train")
COMMANDS = {"validate": cmd_validate, "plan": cmd_validate, "methods": cmd_methods, "train": cmd_train, "sweep": cmd_sweep,
            "retrain": cmd_retrain, **outputs.COMMANDS}


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    with logs.configured(args.verbosity, watch=args.command in LONG_COMMANDS):
        try:
            return COMMANDS[args.command](args)
        except DrydockError as e:
            for problem in e.problems:
                print(f"error: {problem}", file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
