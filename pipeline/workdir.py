"""The work location's contract: what a sweep writes where, and how a file or folder is written.

Every stage reads what an earlier stage (or an earlier run, `--resume`, `drydock retrain`, a
consumer mid-sweep) left in the work directory, so the names below are the one record of the
layout, and every writer goes through `atomic_write`, `atomic_path` or `atomic_folder`: a reader
sees the old file or the new one, never half of one, and a writer killed mid-write leaves the
old file and at most a hidden scratch name beside it (a dot name: `push_last` and a run's file
push skip those at the top of a folder; a folder pushed whole takes what it holds).

    <workdir>/                        the work directory (a folder, or a URI's mirror: `pipeline.storage`)
        cache/                        tokenized data, tokenizers, work shared across trials
        teachers/<key>/               fine-tuned teachers
        mlflow.db, mlartifacts/       the default MLflow store (`pipeline.tracking`)
        <sweep name>/                 a sweep's folder
            .drydock.lock             one run of the spec at a time (`pipeline.lock`)
            state.json                the current run, what `--resume` continues (`pipeline.search.state`)
            results.parquet           one row per trial (`pipeline.results`)
            latency.json              the latency record of the newest run
            variants.parquet, variants/   the runtime variants' table and their ONNX files
            report.md, report.html, pareto.png, pareto.csv   the newest run's report
            retrain.json              the last successful `drydock retrain` (`pipeline.retrain`)
            runs/<run id>/            one run: spec.json, tune/, train/, its own report and latency
                trials/<key>/         one trial: student/, verify.safetensors, metrics.json, outcome.json

Nothing of drydock is imported here: every room may use it.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

# ----------------------------------------------------------------------------------------------
# the layout: one name for every file and folder a sweep writes
# ----------------------------------------------------------------------------------------------

# in the work directory
CACHE_DIR = "cache"
TEACHERS_DIR = "teachers"
TRACKING_DB = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"
# in a sweep's folder
LOCK_FILE = ".drydock.lock"
STATE_FILE = "state.json"
RESULTS_FILE = "results.parquet"
LATENCY_FILE = "latency.json"
VARIANTS_FILE = "variants.parquet"
VARIANTS_DIR = "variants"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PARETO_PNG = "pareto.png"
PARETO_CSV = "pareto.csv"
RETRAIN_FILE = "retrain.json"
RUNS_DIR = "runs"
# in a run's folder
SPEC_FILE = "spec.json"
SPEC_VALUES_FILE = "spec-values.json"  # salted digests of the values spec.json keeps as `${VAR}` (`search.state`)
TUNE_DIR = "tune"
TRAIN_DIR = "train"
TRIALS_DIR = "trials"
STUDY_FILE = "study.journal"  # a searching algorithm's Optuna study (`pipeline.search.study`)
SEARCH_FILE = "search.json"  # what the report shows of that search (`ConfigurationSearcher.summary`)
SEARCH_PNG = "search.png"  # the front's hypervolume after each configuration told
# in a trial's folder
STUDENT_DIR = "student"
METRICS_FILE = "metrics.json"
OUTCOME_FILE = "outcome.json"
VERIFY_FILE = "verify.safetensors"  # the reference batch and logits the export is checked against
CHECKPOINT_FILE = "trainer_state.pt"  # in a checkpoint folder: the loop's own state
RNG_FILE = "rng-rank{rank}.pt"  # in a checkpoint folder: each rank's own generators (CPU, and CUDA on a GPU)


def run_dir(sweep_dir: Path, run_id: str) -> Path:
    """`<sweep_dir>/runs/<run id>/`."""
    return Path(sweep_dir) / RUNS_DIR / run_id


def read_state(sweep_dir: Path) -> dict[str, Any]:
    """The sweep's state.json (the current run id, its MLflow parent run, its status), `{}` when
    no run has started; written by `pipeline.search.state`, read by the report too."""
    path = Path(sweep_dir) / STATE_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def current_run_dir(sweep_dir: Path) -> Path | None:
    """The folder of the run state.json names (the newest), None when the folder records none."""
    run_id = read_state(sweep_dir).get("run_id")
    return run_dir(sweep_dir, str(run_id)) if run_id else None


# ----------------------------------------------------------------------------------------------
# writing: whole or not at all
# ----------------------------------------------------------------------------------------------


def scratch_name(target: Path, kind: str = "tmp") -> Path:
    """A hidden, unique sibling of `target`: in the same folder, so renaming it onto `target` is
    one step of one filesystem, and unique, so two writers never share one."""
    return target.with_name(f".{target.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A scratch path beside `target` for the block to write (a library that takes a path:
    `to_parquet`, a copy, an ONNX export); renamed onto `target` when the block succeeds, removed
    when it raises. The file is created by the writer, so it gets the umask's mode as its
    neighbours do (mkstemp's 0600 would keep it from a consumer running as another user)."""
    target = Path(target)
    tmp = scratch_name(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def trial_key(method: str, config_id: str, seed: int) -> str:
    """A trial's key: its folder's name under `trials/`, its row's `trial_id`, its MLflow run's name."""
    return f"{method}-{config_id}-s{seed}"


def config_id_of(key: str, method: str) -> str:
    """The configuration id inside a `trial_key` (its inverse, given the method: a plugin's method
    name may hold "-" itself), "" for a key that is not one of `method`'s."""
    return key[len(method) + 1:].rsplit("-s", 1)[0] if key.startswith(f"{method}-") else ""


def atomic_write(path: Path, data: bytes | str, *, encoding: str = "utf-8") -> Path:
    """Write `data` to `path` in one step: a reader, or a crash mid-write, leaves the old file whole."""
    with atomic_path(Path(path)) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding=encoding)
    return Path(path)


@contextmanager
def atomic_folder(final: Path, *, replace: bool = False, create: bool = True) -> Iterator[Path]:
    """A fresh scratch folder beside `final` for the block to fill (`create=False`: only its name,
    for a writer that makes the folder itself, as `save_pretrained` does), renamed to `final` when
    it succeeds (readers see all of it or nothing), removed when it raises.

    When `final` appeared meanwhile: with `replace`, ours takes its place (the old one is moved
    aside in one rename, then deleted, so a reader never sees a half-deleted folder); without,
    theirs stays (another process built the same content first) and ours is discarded."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = scratch_name(final)
    if create:
        scratch.mkdir()  # not mkdtemp: its 0700 mode would stick to the published folder
    aside: Path | None = None
    try:
        yield scratch
        if replace and final.exists():
            aside = scratch_name(final, "old")
            os.rename(final, aside)
        try:
            os.rename(scratch, final)
        except OSError:  # a non-empty `final` is there: another process finished first
            if aside is not None and not final.exists():
                os.rename(aside, final)  # the old folder back: a failed rename must not lose it
                aside = None
            if replace or not final.exists():
                raise
    finally:
        for leftover in (scratch, aside):
            if leftover is not None and leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# what a spec's fields count for in a run's records: `--resume` and `drydock retrain`
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """A spec field's marker (`Annotated[type, Counts(...)]` in `pipeline.config`): what the field
    counts for in the records a run leaves behind.

    `resume`: a resumed run must be given the value its run started with (False: how or where it
    runs, or a hub commit the run keeps by itself). `retrain`: the value is in `drydock retrain`'s
    fingerprint of the spec (False: where the same study runs, or where its inputs lie, whose
    contents are fingerprinted instead). `added_later`: the field came after specs were first
    fingerprinted; at the value a spec written without it gets, it is left out of the
    fingerprint, so that spec keeps the fingerprint its last run recorded (`fingerprint_settings`).
    Unmarked fields count for both."""

    resume: bool = True
    retrain: bool = True
    added_later: bool = False


COUNTS_FULLY = Counts()


def counts_of(field: FieldInfo) -> Counts:
    return next((m for m in field.metadata if isinstance(m, Counts)), COUNTS_FULLY)


def resume_exempt(model: type[BaseModel], prefix: str = "") -> set[str]:
    """The dotted paths of the fields (of `model` and the sections inside it) a resumed run may
    be given differently: `flatten_params` keys equal to one, or under one, are not a change."""
    exempt: set[str] = set()
    for name, field in model.model_fields.items():
        if not counts_of(field).resume:
            exempt.add(prefix + name)
            continue
        for section in _sections(field.annotation):
            exempt |= resume_exempt(section, f"{prefix}{name}.")
    return exempt


def fingerprint_settings(model: BaseModel) -> dict[str, Any]:
    """`model` as JSON data, without what does not count for `drydock retrain` (`Counts`), and
    without each field added later that holds the value a spec written before it existed gets:
    the one implementation of "a spec unchanged keeps its fingerprint"."""
    data = model.model_dump(mode="json")
    _drop_uncounted(model, data)
    return data


def _drop_uncounted(model: BaseModel, data: dict[str, Any]) -> None:
    earlier: BaseModel | None = None
    for name, field in type(model).model_fields.items():
        counts, value = counts_of(field), getattr(model, name)
        if name not in data:
            continue
        if not counts.retrain:
            del data[name]
        elif counts.added_later:
            earlier = earlier or _as_written_before(model)
            before = getattr(earlier, name) if earlier is not None else field.get_default(call_default_factory=True)
            if value == before:
                del data[name]
        elif isinstance(value, BaseModel) and isinstance(data[name], dict):
            _drop_uncounted(value, data[name])


def _as_written_before(model: BaseModel) -> BaseModel | None:
    """`model` validated again from only its fields that count and were there from the start:
    what a spec written before the later fields existed holds (a default may follow other
    fields, as the latency shapes follow the front's batch size and length). None when those
    alone do not validate: the later fields' declared defaults stand in."""
    kept = {name: getattr(model, name) for name, field in type(model).model_fields.items()
            if counts_of(field).retrain and not counts_of(field).added_later}
    try:
        return type(model).model_validate(kept)
    except ValidationError:
        return None


def _sections(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's type holds directly (`X`, `X | None`); not those inside a list or a
    mapping, whose items have no path of their own in `flatten_params`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (list, tuple, dict, set, frozenset):
        return []
    return [section for arg in get_args(annotation) for section in _sections(arg)]
