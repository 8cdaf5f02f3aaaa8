"""One trial: a method with concrete parameters and a seed, from cached data to a saved export.

It runs one way wherever it runs, `drydock train` in-process or a Ray Train worker of a sweep:
train, export on rank 0, save the reference logits beside the student. Verifying the export in
a fresh process (`verify_trial`) is the caller's next step: `drydock train` calls it at once,
a sweep's recorder in its one long-lived verification process.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from methods import get_declaration, get_method
from methods.declaration import MethodParams
from pipeline.config import SweepSpec, default_params
from pipeline.prepare.revisions import source_revisions
from pipeline.prepare.stage import Prepared, prepare
from pipeline.prepare.tokenized import prepare_unlabeled
from pipeline.training import loop
from pipeline.training.context import method_context
from pipeline.training.export import ExportMismatch, export_student, verify_saved
from pipeline.training.teacher import TeacherResult, ensure_teacher

METRICS_FILE = "metrics.json"


@dataclass
class TrialOutcome:
    metrics: dict[str, Any]
    student_path: Path | None


def resolve_params(spec: SweepSpec, method_name: str, overrides: dict[str, Any] | None = None) -> MethodParams:
    """The spec's fixed values, then concrete overrides (a sampled search point); a parameter
    still given as a search domain falls back to the method's default."""
    params = default_params(spec.methods.get(method_name) or {})
    params.update(overrides or {})
    return get_declaration(method_name).Params.model_validate(params)


class _Laps:
    """Seconds spent in each part of the trial, recorded in metrics.json (`timings`)."""

    def __init__(self) -> None:
        self.clock = time.perf_counter()
        self.timings: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[f"seconds_{name}"] = now - self.clock
        self.clock = now


def run_trial(
    spec: SweepSpec,
    method_name: str,
    params: MethodParams,
    seed: int,
    workdir: Path,
    output_dir: Path,
    *,
    prepared: Prepared | None = None,
    teacher: TeacherResult | None = None,
    dist: loop.Distributed | None = None,
    reporter: loop.Reporter | None = None,
    log: Callable[[str], None] = print,
    share_work: bool = True,
) -> TrialOutcome:
    """One configuration trained, exported and recorded in `output_dir`. `share_work`: whether
    work a method shares across trials (MiniLM's distilled student) is cached in `workdir`, which
    every rank of the trial must see (`pipeline.training.shared`)."""
    dist = dist or loop.Distributed()  # one process: rank 0 of 1
    lap = _Laps()
    method_cls = get_method(method_name)
    # as the configuration was validated where it was drawn (a sweep's `Trial`) or resolved
    # (`resolve_params`): the method receives this very object
    typed = params
    prepared = prepared or prepare(spec, workdir)
    lap("prepare")
    teacher_model = None
    if method_cls.needs_teacher(typed):
        teacher = teacher or ensure_teacher(spec, prepared, workdir, log=log)
        teacher_model = teacher.load()
    lap("teacher")
    ctx = method_context(spec, prepared, teacher_model, learning_rate=method_cls.learning_rate_override(typed))
    method = method_cls(typed, ctx)
    request = method.unlabeled()
    unlabeled = None
    if request is not None:
        unlabeled = prepare_unlabeled(spec.task, prepared.tokenizer, workdir / "cache", request.max_samples, request.files)
    result = loop.run(
        method, train_set=prepared.data.train, dev=prepared.data.dev, task=prepared.data.task,
        train=spec.train, seed=seed, dist=dist, reporter=reporter, unlabeled_set=unlabeled, pad_id=prepared.pad_id,
        shared_root=workdir / "cache" / "methods" if share_work else None,
        shared_scope=teacher.key if teacher else prepared.data.fingerprint,
    )
    lap("train")
    metrics = trial_metrics(spec, method_name, typed.model_dump(mode="json"), seed, prepared, teacher, result, dist)
    if not dist.is_main:
        return TrialOutcome(metrics=metrics, student_path=None)
    student_path = output_dir / "student"
    # drydock.json: the hub commits the teacher and the data came from too (docs/outputs.md)
    metadata = {**metrics, **source_revisions(spec, prepared.data.revision), "teacher_path": str(teacher.path) if teacher else None}
    dataset = spec.task.hub_dataset()  # the model card's dataset, by the id the hub links
    if dataset is not None:
        metadata.update(dataset=dataset[0], dataset_config=dataset[1])
    metrics.update(export_student(method, prepared, output_dir, metadata))
    lap("export")
    metrics["timings"] = lap.timings
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2, default=str))
    return TrialOutcome(metrics=metrics, student_path=student_path)


def trial_metrics(spec: SweepSpec, method_name: str, params: dict[str, Any], seed: int, prepared: Prepared,
                  teacher: TeacherResult | None, result: loop.LoopResult, dist: loop.Distributed) -> dict[str, Any]:
    """metrics.json's fields (docs/outputs.md): the best evaluation, the teacher's, how it ran."""
    primary = prepared.data.task.primary_metric
    return {
        "method": method_name,
        "params": params,
        "seed": seed,
        "metric_name": primary,
        "metric": result.best_metrics.get(f"eval/{primary}"),
        "metrics": {k.split("/", 1)[1] if k.startswith("eval/") else k: v for k, v in result.best_metrics.items() if "/" in k},
        "teacher_metric": (teacher.metrics.get(f"eval/{primary}") if teacher else None),
        "train_seconds": result.train_seconds,
        "steps": result.steps,
        "data_fingerprint": prepared.data.fingerprint,
        "strategy": dist.strategy,
        "node_id": dist.node_id,
        "world_size": dist.world_size,
        "teacher": spec.teacher.model,
    }


def verify_trial(output_dir: Path) -> float:
    """Reload the trial's student in a fresh process without drydock and compare its logits with
    the trained model's; the difference is added to metrics.json. A student that fails does not
    count: its metrics.json is removed and `ExportMismatch` raised."""
    started = time.perf_counter()
    metrics_file = output_dir / METRICS_FILE
    try:
        diff = verify_saved(output_dir)
    except ExportMismatch:
        metrics_file.unlink(missing_ok=True)
        raise
    metrics = json.loads(metrics_file.read_text())
    metrics["export_max_abs_diff"] = diff
    metrics.setdefault("timings", {})["seconds_verify"] = time.perf_counter() - started
    metrics_file.write_text(json.dumps(metrics, indent=2, default=str))
    return diff
