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

Exit codes: 0 success; 1 the run itself failed; 2 a user mistake (bad spec, missing data, unknown
label, an --output folder that is not empty), one line per problem and no traceback; 3 the MLflow
tracking server is unreachable (no answer, a refused connection, a gateway's 502/503/504 at the
first call: said within seconds, before any work; `pipeline.tracking.TrackingUnreachable`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path

from pipeline.cli import logs, outputs
from pipeline.errors import DrydockError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3  # 3: a DrydockError's `exit_code` (TrackingUnreachable)
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

    p = sub.add_parser("sweep", help="prepare → teacher → search on Ray; prints the trial table")
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
    from pipeline.config import load_spec
    from pipeline.retrain import run_cli

    return run_cli(load_spec(args.spec, args.overrides), args.workdir, args.address, log=logs.log_line)


def cmd_sweep(args: argparse.Namespace) -> int:
    """The sweep under the spec's lock, the one `drydock retrain` takes (`pipeline.lock`): a run
    of the same spec and work directory already going makes this one refuse at once, exit 1,
    naming it; the hub commits are resolved once here, inside the lock, for the whole sweep."""
    from pipeline.config import load_spec
    from pipeline.lock import Locked, spec_lock
    from pipeline.storage import WorkStore

    spec = load_spec(args.spec, args.overrides)
    with ExitStack() as held:
        try:  # in <workdir>/<name>/ (for a URI, this node's folder for it: the lock is this host's)
            held.enter_context(spec_lock(WorkStore.open(args.workdir).path(spec.name), f"drydock sweep {spec.name}"))
        except Locked as e:
            print(f"error: drydock sweep {spec.name}: {e}; it was not started (wait for that run to end)", file=sys.stderr)
            return EXIT_FAILED
        from pipeline.prepare.revisions import pin_revisions  # after the lock: a refusal costs no Ray import
        from pipeline.sweep import run_sweep

        frame = run_sweep(pin_revisions(spec), args.workdir, resume=args.resume, address=args.address, log=logs.log_line)
    from pipeline.cli.tables import pareto_table_text, summary_table  # the tables import select: after the lock too

    print(summary_table(frame))
    print(pareto_table_text(frame, spec.selection))
    print(outputs.where_to_look(spec, WorkStore.open(args.workdir)))
    failed = int((frame["status"] == "failed").sum()) if len(frame) else 0
    if failed:
        print(f"{failed} trial(s) failed; see the error column", file=sys.stderr)
    return EXIT_OK if len(frame) and failed < len(frame) else EXIT_FAILED


def cmd_validate(args: argparse.Namespace) -> int:
    from pipeline.config import check_for_sweep, load_deepspeed_preset, load_spec

    spec = load_spec(args.spec, args.overrides)
    problems: list[str] = []
    # a file the spec names that only this machine can check (a sweep reads it too); a method to
    # run; the teacher's own config, where it is here without the network
    for check in (load_deepspeed_preset, check_for_sweep):
        try:
            check(spec)
        except DrydockError as e:
            problems += e.problems
    if problems:
        raise DrydockError(problems)
    from pipeline.cli.plan import format_plan, plan_summary, plan_sweep

    plan = plan_sweep(spec)  # before "valid": a draw a method refuses is a problem too
    # validate keeps to one line (scripts read it: benchmarks/gpu_smoke.sh); plan adds the table
    print(f"{args.spec}: valid (sweep {spec.name!r}, task {spec.task.name}, methods: {', '.join(spec.methods)}; {plan_summary(plan)})")
    if args.command == "plan":
        print(format_plan(plan))
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
        from pipeline.config import did_you_mean

        raise DrydockError(f"--method: unknown method {args.method!r} (registered: {', '.join(registered_methods())})"
                           f"{did_you_mean(args.method, registered_methods())}")
    params = resolve_params(spec, args.method)
    workdir = args.workdir or Path("runs")
    seed = spec.seeds[0] if args.seed is None else args.seed
    prepare_output(args.output, args.replace, keep=[Path.cwd(), workdir, Path(args.spec)])
    outcome = run_trial(spec, args.method, params, seed, workdir, args.output, log=logs.log_line)
    outcome.metrics["export_max_abs_diff"] = verify_trial(args.output)  # counts only once it reloads alone
    m = outcome.metrics
    teacher = f", teacher {m['teacher_metric']:.4f}" if m.get("teacher_metric") is not None else ""
    print(
        f"{args.method}: {m['metric_name']} {m['metric']:.4f}{teacher}; {m['num_params_encoder']:,} encoder parameters; "
        f"{m['steps']} steps in {m['train_seconds']:.1f}s → {args.output / 'student'}"
    )
    return EXIT_OK


def prepare_output(output: Path, replace: bool, keep: list[Path]) -> None:
    """`train --output` gets a new or empty folder: a student written over another would keep the
    other's files beside it (a CoFi export's `_pruned_bert.py`, which loading it runs). A folder
    that is not empty is refused unless `replace`, which empties it first; never one that holds
    what `keep` names (the current directory, the work directory, the spec)."""
    if output.exists() and not output.is_dir():
        raise DrydockError(f"--output: {output} is a file, not a folder")
    if not output.is_dir() or not any(output.iterdir()):
        return
    if not replace:
        names = sorted(p.name for p in output.iterdir())
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        raise DrydockError(f"--output: {output} is not empty ({shown}); give --replace to empty it first, or name a new folder")
    folder = output.resolve()
    for path in keep:
        held = path.resolve()
        if held == folder or folder in held.parents:
            raise DrydockError(f"--output: {output} holds {path}; --replace would delete it: name a folder of its own")
    for child in output.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


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
            return getattr(e, "exit_code", EXIT_USAGE)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
