"""The selection stage's commands, merged into `drydock` by pipeline/cli/main.py.

    drydock report WORKDIR/SWEEP                          rebuild report.md/html and pareto.png from files
                                                          (of the newest run; WORKDIR/SWEEP/runs/ID: that run's)
    drydock registry list NAME [--tracking-uri URI]       versions, their figures, and the aliases
    drydock promote NAME VERSION [--tracking-uri URI]     move the champion alias by hand
    drydock eval MODEL SPEC [--split dev|test] [--set k=v]  score a folder or models:/ reference

Registry commands find MLflow by `--tracking-uri`, else MLFLOW_TRACKING_URI, else the default
work directory's store (`runs/mlflow.db`, where `drydock sweep` puts it without --workdir).
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import DrydockError

if TYPE_CHECKING:
    from pipeline.config import SweepSpec
    from pipeline.storage import WorkStore

EXIT_OK = 0
DEFAULT_WORKDIR = Path("runs")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="rebuild a sweep's report and Pareto plot from its results (no re-running)")
    p.add_argument("sweep_dir", type=Path, metavar="WORKDIR/SWEEP", help="the sweep's folder, e.g. runs/quickstart (its newest run), "
                   "or a run's folder, runs/quickstart/runs/<run id>")

    p = subparsers.add_parser("registry", help="inspect the MLflow model registry")
    registry = p.add_subparsers(dest="registry_command", required=True)
    q = registry.add_parser("list", help="versions of a registered model with their figures and aliases")
    q.add_argument("name", help="registered model name (tracking.registered_model)")
    _add_uri(q)

    p = subparsers.add_parser("promote", help="point the champion alias at a version by hand")
    p.add_argument("name", help="registered model name")
    p.add_argument("version", help="version number")
    _add_uri(p)

    p = subparsers.add_parser("eval", help="score a student folder or models:/ reference on the spec's task")
    p.add_argument("model", help="an exported student folder, models:/NAME@champion or models:/NAME/VERSION")
    p.add_argument("spec", help="sweep spec (YAML) naming the task")
    p.add_argument("--split", default="dev", choices=["dev", "dev_mismatched", "test"], help="default: dev")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec field (repeatable)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="work directory of the MLflow store (default: runs/)")
    _add_uri(p)


def _add_uri(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else runs/mlflow.db)")


def resolve_uri(given: str | None) -> str:
    if given:
        return given
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    default = DEFAULT_WORKDIR / "mlflow.db"
    if default.is_file():
        return f"sqlite:///{default.resolve()}"
    raise DrydockError(f"--tracking-uri: not given, MLFLOW_TRACKING_URI is unset and {default} does not exist")


def where_to_look(spec: SweepSpec, store: WorkStore, champion: Callable[[str, str], str | None] | None = None) -> str:
    """The lines a finished sweep ends with: its files, the command that opens its MLflow runs,
    and the registry reference a consumer loads — the next three things a user reaches for,
    printed where they are kept (a folder or a URI). `champion(uri, name)`: the champion's
    version (default: asked of the registry)."""
    from pipeline.select.champion import CHAMPION
    from pipeline.tracking import redacted, tracking_uri
    from pipeline.workdir import PARETO_PNG, REPORT_HTML, REPORT_MD, RESULTS_FILE

    name = spec.name
    report = [store.uri(f"{name}/{REPORT_MD}")]
    if store.is_remote or store.path(f"{name}/{REPORT_HTML}").is_file():
        report.append(store.uri(f"{name}/{REPORT_HTML}"))
    uri = tracking_uri(spec, store.local)  # the store the sweep wrote (pipeline.sweep: SweepTracker(spec, local))
    if uri.startswith(("http://", "https://")):
        mlflow = f"{redacted(uri)} (the tracking server's own UI)"
    else:
        mlflow = f"mlflow ui --backend-store-uri {shlex.quote(redacted(uri))}"
    model = spec.registered_model_name
    try:
        version = (champion or champion_of)(uri, model)
        held = f" (version {version})" if version else " (not set: no student was registered)"
    except Exception as e:  # noqa: BLE001 - the sweep is done; a registry that fails to answer only loses this line's version
        held = f" (version not looked up: {type(e).__name__})"
    return "\n".join([
        f"results:  {store.uri(f'{name}/{RESULTS_FILE}')}",
        f"report:   {report[0]}", *(f"          {more}" for more in report[1:]),
        f"plot:     {store.uri(f'{name}/{PARETO_PNG}')}",
        f"mlflow:   {mlflow}",
        f"champion: models:/{model}@{CHAMPION}{held}",
    ])


def champion_of(uri: str, name: str) -> str | None:
    """The version the registry's champion alias points at, or None."""
    from pipeline.select.registry import champion_version, client_for

    found = champion_version(client_for(uri), name)
    return str(found.version) if found is not None else None


def cmd_report(args: argparse.Namespace) -> int:
    from pipeline import results as results_table
    from pipeline.cli.tables import pareto_table_text, runtimes_table_text
    from pipeline.config import SelectionConfig
    from pipeline.measure.table import read_variants, variants_path
    from pipeline.select.report import current_run_dir, rebuild_report, saved_spec

    files = rebuild_report(args.sweep_dir)
    spec = saved_spec(args.sweep_dir)
    frame = results_table.read_results(args.sweep_dir / results_table.RESULTS_FILE)
    variants = read_variants(variants_path(args.sweep_dir))
    print(pareto_table_text(frame, spec.selection if spec else None, variants))
    runtimes = runtimes_table_text(variants, frame, spec.selection if spec else SelectionConfig())
    if runtimes:
        print(runtimes)
    print(f"report: {files.markdown}\n        {files.html}\nplot:   {files.plot}")
    run_dir = current_run_dir(args.sweep_dir)
    if run_dir is not None:  # the top level holds copies of the newest run's
        print(f"run:    {run_dir} (this run's own copies; each earlier run's stay in its folder under runs/)")
    return EXIT_OK


def cmd_registry(args: argparse.Namespace) -> int:
    from pipeline.cli.tables import registry_table_text
    from pipeline.select.registry import client_for, require_model

    uri = resolve_uri(args.tracking_uri)
    client = client_for(uri)
    require_model(client, args.name, uri)
    print(registry_table_text(client, args.name))
    return EXIT_OK


def cmd_promote(args: argparse.Namespace) -> int:
    from pipeline.select.champion import CHAMPION
    from pipeline.select.registry import client_for, promote, require_model

    uri = resolve_uri(args.tracking_uri)
    client = client_for(uri)
    require_model(client, args.name, uri)
    previous = promote(client, args.name, args.version)
    was = f"v{previous}" if previous else "no version"
    print(f"{args.name}: {CHAMPION} → v{args.version} (was {was})")
    return EXIT_OK


def cmd_eval(args: argparse.Namespace) -> int:
    from pipeline.config import load_spec
    from pipeline.select.evaluate import evaluate, format_result, is_registry_ref
    from pipeline.tracking import tracking_uri

    spec = load_spec(args.spec, args.overrides)
    uri = None
    if is_registry_ref(args.model):
        uri = args.tracking_uri or tracking_uri(spec, args.workdir.resolve())
    print(format_result(evaluate(args.model, spec, args.split, uri)))
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "report": cmd_report,
    "registry": cmd_registry,
    "promote": cmd_promote,
    "eval": cmd_eval,
}
