"""The functions of drydock's Python API; the CLI (`pipeline.cli`) calls them and prints.

Each takes a spec as a `SweepSpec`, a YAML file's path or a mapping, so the common cases are
one call. The heavy imports happen inside: a call pays for what it uses, and `import drydock`
for nothing. Every call runs under `pipeline.cli.logs.library`: the caller's logging decides
where its lines go, and whatever levels it (or a library it imports) set are put back.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drydock.results import MethodInfo, MethodParam, RetrainResult, Student, SweepResult, TrainResult
from pipeline.errors import DrydockError, SpecError, SweepLocked

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.cli.plan import SweepPlan
    from pipeline.config import SweepSpec
    from pipeline.storage import WorkStore

Overrides = Sequence[str] | Mapping[str, Any] | None
DEFAULT_WORKDIR = "runs"


@contextmanager
def ray_of_this_call(keep: bool) -> Iterator[None]:
    """Ray, when this call started it (a local instance, or the connection to a cluster), is
    shut down as the call returns, unless `keep`: a notebook kernel or a scheduler's worker that
    ran a sweep otherwise kept Ray's processes, their memory and the connection for as long as
    it lived. A Ray the caller had started (`ray.init` before the call) is left as it was."""
    ray = sys.modules.get("ray")  # never imported for this: a call that fails early starts no Ray
    running_before = ray is not None and ray.is_initialized()
    try:
        yield
    finally:
        ray = sys.modules.get("ray")
        if not keep and not running_before and ray is not None and ray.is_initialized():
            ray.shutdown()
            from pipeline.search.ray_instance import forget_local_instance

            forget_local_instance()


def load_spec(source: SweepSpec | str | os.PathLike[str] | Mapping[str, Any], overrides: Overrides = None) -> SweepSpec:
    """Read and validate a spec: a YAML file's path, a mapping of the same shape, or a spec.

    `overrides` are the CLI's `--set`: `["train.epochs=1"]`, or `{"train.epochs": 1}`. Raises
    `SpecError` listing every problem found, each as `field.path: what was expected`."""
    from pipeline.cli import logs

    with logs.library(show=False):  # the spec's package imports the methods' registry, transformers with it
        from pipeline.config import SweepSpec, spec_as_written, spec_from_dict
        from pipeline.config import load_spec as read

    lines = _override_lines(overrides)
    if isinstance(source, SweepSpec):
        return spec_from_dict(spec_as_written(source), lines) if lines else source  # its ${VAR}s stay as written
    if isinstance(source, Mapping):
        return spec_from_dict(copy.deepcopy(dict(source)), lines)
    return read(Path(source), lines)


def _override_lines(overrides: Overrides) -> list[str]:
    """A mapping's values as `key=value` lines the loader parses as YAML (JSON is YAML)."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        return [overrides]
    return list(overrides)


def validate(spec: SweepSpec | str | os.PathLike[str] | Mapping[str, Any], overrides: Overrides = None) -> SweepPlan:
    """Check a spec as `drydock validate` does, without running anything: its fields, its
    methods against the resources, the teacher's own limits (where its config is on this
    machine) and the DeepSpeed preset it names. Returns the plan it counted (`plan`; its time
    estimate at a reference speed, not this machine's); raises `SpecError` with every problem at
    once."""
    return _checked_plan(spec, overrides, probe=False)


def _checked_plan(spec: SweepSpec | str | os.PathLike[str] | Mapping[str, Any], overrides: Overrides, probe: bool) -> SweepPlan:
    from pipeline.cli import logs

    with logs.library(show=False):  # what importing the stages' libraries sets is put back
        from pipeline.cli.plan import plan_sweep, probe_flops_per_thread
        from pipeline.config import SweepSpec, check_for_sweep, load_deepspeed_preset

        failed = SpecError([])
        try:
            checked = load_spec(spec, overrides)
        except SpecError as e:  # the other checks still run on the rest of the spec: every problem in one pass
            if not isinstance(e.partial, SweepSpec):
                raise
            checked, failed = e.partial, e
        problems = list(failed.problems)
        for check in (load_deepspeed_preset, check_for_sweep):
            try:
                check(checked)
            except DrydockError as e:
                problems += failed.about_the_rest([p for p in e.problems if p not in problems])
        if problems:
            raise SpecError(problems)
        probed = probe_flops_per_thread() if probe and not checked.resources.use_gpu else None  # GPU trials get no estimate
        return plan_sweep(checked, flops_per_thread=probed)  # a draw a method refuses is a problem too


def plan(spec: SweepSpec | str | os.PathLike[str] | Mapping[str, Any], overrides: Overrides = None) -> SweepPlan:
    """What a sweep of the spec would run: trials per method, steps per trial, the teacher's
    steps and a time estimate for this machine, whose speed it probes (half a second; `print(plan)`
    shows `drydock plan`'s table). Validates the spec first, as `validate`."""
    return _checked_plan(spec, overrides, probe=True)


def sweep(spec: SweepSpec | str | os.PathLike[str] | Mapping[str, Any], workdir: str | os.PathLike[str] = DEFAULT_WORKDIR, *,
          resume: bool = False, address: str | None = None, show: bool | None = None, keep_ray: bool = False) -> SweepResult:
    """Run the whole sweep — prepare, teacher, search on Ray, select — and return its trials,
    front, champion and files.

    `workdir`: a folder, or a URI every node reaches (`s3://bucket/prefix`); `resume`: continue
    the last run of this sweep; `address`: a Ray cluster (default: the spec's
    `resources.address`, else RAY_ADDRESS, else a local instance); the Ray this call started is
    shut down when it returns unless `keep_ray` (a Ray you started with `ray.init` is left
    running). `show`: print progress lines (default: when nothing in the process configured
    logging; otherwise they go to the `drydock` logger). Raises `DrydockError` at once for a work
    location that takes no files, `SweepLocked` at once when a
    run of the same spec and work directory is going, `SpecError`/`DataError` before any work
    for a mistake, `SweepInterrupted` on SIGINT/SIGTERM (the run is saved: `resume=True`)."""
    from pipeline.cli import logs
    from pipeline.lock import Locked, spec_lock
    from pipeline.storage import WorkStore

    spec = load_spec(spec)
    store = WorkStore.open(os.fspath(workdir))
    store.check_writable()  # before the lock, which makes a folder there: `--workdir /proc` was a traceback
    with logs.library(show) as log, ExitStack() as held, ray_of_this_call(keep_ray):
        try:  # in <workdir>/<name>/ (for a URI, this node's folder for it: the lock is this host's)
            held.enter_context(spec_lock(store.path(spec.name), f"drydock sweep {spec.name}"))
        except Locked as e:
            raise SweepLocked(f"drydock sweep {spec.name}: {e}; it was not started (wait for that run to end)", e.holder) from None
        from pipeline.prepare.revisions import pin_revisions  # after the lock: a refusal costs no Ray import
        from pipeline.sweep import run_sweep

        frame = run_sweep(pin_revisions(spec), os.fspath(workdir), resume=resume, address=address, log=log)
        return sweep_result(spec, store, frame)


def sweep_result(spec: SweepSpec, store: WorkStore, frame: pd.DataFrame) -> SweepResult:
    """A finished sweep's record, read back from what the select stage wrote."""
    from pipeline.cli.outputs import champion_of
    from pipeline.cli.tables import pareto_table_text, runtimes_table_text
    from pipeline.measure.table import read_variants, variants_path
    from pipeline.select.champion import CHAMPION
    from pipeline.select.pareto import select
    from pipeline.select.report import ReportContext, served_marks
    from pipeline.tracking import tracking_uri
    from pipeline.workdir import PARETO_PNG, REPORT_MD, RESULTS_FILE

    uri = tracking_uri(spec, store.local)
    try:
        version = champion_of(uri, spec.registered_model_name)
    except Exception:  # noqa: BLE001 - the sweep is done: a registry that fails to answer now only loses the version
        version = None
    variants = read_variants(variants_path(store.path(spec.name)))  # this node's copy: the select stage ran here
    # its `champion` column marks the alias's candidate, as the printed table does (`served_marks`)
    front = served_marks(select(frame, spec.selection), ReportContext(sweep=spec.name, selection=spec.selection, variants=variants)).front
    runtimes = runtimes_table_text(variants, frame, spec.selection)
    return SweepResult(
        name=spec.name, results=frame, front=front,
        champion=f"models:/{spec.registered_model_name}@{CHAMPION}" if version else None, champion_version=version,
        tracking_uri=uri, results_file=store.uri(f"{spec.name}/{RESULTS_FILE}"), report=store.uri(f"{spec.name}/{REPORT_MD}"),
        plot=store.uri(f"{spec.name}/{PARETO_PNG}"), front_table=pareto_table_text(frame, spec.selection, variants),
        variants=variants if runtimes else None, runtimes_table=runtimes,
    )


def train(spec: SweepSpec | str | os.PathLike[str] | Mapping[str, Any], method: str, output: str | os.PathLike[str], *,
          overrides: Overrides = None, workdir: str | os.PathLike[str] = DEFAULT_WORKDIR, seed: int | None = None,
          replace: bool = False, show: bool | None = None) -> TrainResult:
    """Train one configuration of `method` in this process, without Ray: the spec's fixed
    parameter values (a searched parameter takes the method's default), its first seed unless
    `seed`. The student is exported to `output`/student and reloaded alone to check it; `output`
    must be new or empty (`replace`: empty it first, once the spec and the method are known
    good; never a folder holding the spec's file, the work directory or the current directory).
    The data and teacher caches are `workdir`'s, shared with sweeps."""
    from methods import registered_methods
    from pipeline.cli import logs
    from pipeline.config import did_you_mean

    loaded = load_spec(spec, overrides)
    if method not in registered_methods():
        raise DrydockError(f"--method: unknown method {method!r} (registered: {', '.join(registered_methods())})"
                           f"{did_you_mean(method, registered_methods())}")
    output, work = Path(output), Path(workdir)
    keep = [Path.cwd(), work, *([Path(spec)] if isinstance(spec, (str, os.PathLike)) else [])]
    prepare_output(output, replace, keep=keep)  # after every check: a mistake never costs the folder
    with logs.library(show) as log:
        from pipeline.training.trial import resolve_params, run_trial, verify_trial

        outcome = run_trial(loaded, method, resolve_params(loaded, method), loaded.seeds[0] if seed is None else seed, work, output,
                            log=log)
        outcome.metrics["export_max_abs_diff"] = verify_trial(output)  # counts only once it reloads alone
    return TrainResult(method=method, metrics=outcome.metrics, student=output / "student")


def prepare_output(output: Path, replace: bool, keep: list[Path]) -> None:
    """`train`'s output gets a new or empty folder: a student written over another would keep
    the other's files beside it (a CoFi export's `_pruned_bert.py`, which loading it runs). A
    folder that is not empty is refused unless `replace`, which empties it first; never one that
    holds what `keep` names (the current directory, the work directory, the spec)."""
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


def retrain(spec: SweepSpec | str | os.PathLike[str] | Mapping[str, Any], workdir: str | os.PathLike[str] = DEFAULT_WORKDIR, *,
            address: str | None = None, show: bool | None = None, keep_ray: bool = False) -> RetrainResult:
    """For schedulers: run the sweep again only if the spec, the data or the teacher changed
    since the last successful run (`pipeline.retrain`); the champion moves only on improvement.
    The Ray this call started is shut down when it returns unless `keep_ray`, as for `sweep`.
    Raises `SweepLocked` ("skipped") when a run of the spec holds its lock."""
    from pipeline import retrain as job
    from pipeline.cli import logs
    from pipeline.lock import Locked

    spec = load_spec(spec)
    with logs.library(show) as log, ray_of_this_call(keep_ray):
        try:
            outcome, details = job.retrain(spec, os.fspath(workdir), address=address, log=log)
        except Locked as e:
            raise SweepLocked(f"drydock retrain {spec.name}: skipped: {e}", e.holder) from None
    return RetrainResult(outcome=outcome, details=details, summary=job.summary_line(outcome, details, spec))


def methods() -> dict[str, MethodInfo]:
    """The registered method plugins (entry points `drydock.methods`), with their parameters'
    defaults and descriptions: what a spec's `methods:` section may name."""
    from pipeline.cli import logs

    with logs.library(show=False):
        from methods import get_declaration, registered_methods

    found = {}
    for name in registered_methods():
        cls = get_declaration(name)
        params = {field: MethodParam(info.get_default(call_default_factory=True), info.description or "")
                  for field, info in cls.Params.model_fields.items()}
        found[name] = MethodInfo(name=name, summary=cls.summary, params=params)
    return found


def load_student(ref: str | os.PathLike[str], *, tracking_uri: str | None = None, max_length: int | None = None,
                 show: bool | None = None) -> Student:
    """A student as its consumers load it: an exported folder (a transformers pipeline), or a
    registry reference `models:/NAME@champion` / `models:/NAME/VERSION` (MLflow's pyfunc, in the
    runtime it was registered for). `tracking_uri`: the registry's store (default:
    MLFLOW_TRACKING_URI, else runs/mlflow.db). `max_length`: truncate longer texts (a folder's
    default is the model's own limit)."""
    from pipeline.cli import logs
    from pipeline.select.evaluate import is_registry_ref, load_predictor
    from pipeline.workdir import TRACKING_DB

    text = os.fspath(ref)
    uri = None
    if is_registry_ref(text):
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:
            default = Path(DEFAULT_WORKDIR) / TRACKING_DB
            if not default.is_file():
                raise DrydockError(f"tracking_uri: not given, MLFLOW_TRACKING_URI is unset and {default} does not exist")
            uri = f"sqlite:///{default.resolve()}"
    with logs.library(show):
        predict = load_predictor(text, max_length, uri)

    def labelled(inputs: list[Any]) -> pd.DataFrame:
        with logs.library(show=False):  # the first call may import the runtime's libraries
            return predict(inputs)

    return Student(ref=text, _predict=labelled)
