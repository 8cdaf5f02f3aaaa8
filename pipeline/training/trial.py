"""One trial: a method with concrete parameters and a seed, from cached data to a verified export.

Shared by `drydock train` (in-process) and the Ray Train worker of a sweep. The caller has
already run the prepare and teacher stages (or the trial runs them through the cache).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from methods import get_method
from methods._bert import count_parameters
from pipeline.config import SweepSpec
from pipeline.prepare.stage import Prepared, prepare
from pipeline.training import loop
from pipeline.training.context import method_context
from pipeline.training.export import VERIFY_FILE, reference_batch, reference_logits, save_reference, save_student, verify_export
from pipeline.training.teacher import TeacherResult, ensure_teacher

METRICS_FILE = "metrics.json"


@dataclass
class TrialOutcome:
    metrics: dict[str, Any]
    student_path: Path | None


def resolve_params(spec: SweepSpec, method_name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec's fixed values, then concrete overrides (a sampled search point); a parameter
    still given as a search domain falls back to the method's default."""
    from pipeline.config import default_params

    params = default_params(spec.methods.get(method_name) or {})
    params.update(overrides or {})
    return get_method(method_name).Params.model_validate(params).model_dump()


def run_trial(
    spec: SweepSpec,
    method_name: str,
    params: dict[str, Any],
    seed: int,
    workdir: Path,
    output_dir: Path,
    *,
    prepared: Prepared | None = None,
    teacher: TeacherResult | None = None,
    dist: loop.Distributed | None = None,
    reporter: loop.Reporter | None = None,
    log: Callable[[str], None] = print,
    verify: bool = True,
) -> TrialOutcome:
    dist = dist or loop.Distributed()  # one process: rank 0 of 1
    clock = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[f"seconds_{name}"] = now - clock
        clock = now

    method_cls = get_method(method_name)
    typed = method_cls.Params.model_validate(params)
    prepared = prepared or prepare(spec, workdir)
    lap("prepare")
    teacher_model = None
    if method_cls.needs_teacher(typed):
        teacher = teacher or ensure_teacher(spec, prepared, workdir, log=log)
        teacher_model = teacher.load()
    lap("teacher")
    lr = getattr(typed, "learning_rate", None)
    ctx = method_context(
        spec, prepared, teacher_model, seed, learning_rate=lr,
        cache_dir=workdir / "cache" / "methods", cache_scope=teacher.key if teacher else prepared.data.fingerprint,
    )
    method = method_cls(typed, ctx)

    unlabeled = None
    request = method.unlabeled()
    if request is not None:
        from pipeline.prepare.data import prepare_unlabeled

        unlabeled = prepare_unlabeled(spec.task, prepared.tokenizer, workdir / "cache", request.max_samples, request.files)

    result = loop.run(
        method, train_set=prepared.data.train, dev=prepared.data.dev, task=prepared.data.task,
        train=spec.train, seed=seed, dist=dist, reporter=reporter, unlabeled_set=unlabeled, pad_id=prepared.pad_id,
    )
    lap("train")
    primary = prepared.data.task.primary_metric
    metrics: dict[str, Any] = {
        "method": method_name,
        "params": typed.model_dump(mode="json"),
        "seed": seed,
        "metric_name": primary,
        "metric": result.best_metrics.get(f"eval/{primary}"),
        "metrics": {k.split("/", 1)[1] if k.startswith("eval/") else k: v for k, v in result.best_metrics.items() if "/" in k},
        "teacher_metric": (teacher.metrics.get(f"eval/{primary}") if teacher else None),
        "train_seconds": result.train_seconds,
        "steps": result.steps,
        "data_fingerprint": prepared.data.fingerprint,
        "strategy": dist.strategy,
        "node_id": _node_id(),
        "world_size": dist.world_size,
        "teacher": spec.teacher.model,
    }
    student_path = None
    if dist.is_main:
        student_path = output_dir / "student"
        eval_model = method.eval_model()
        batch = reference_batch(prepared.data.dev["dev"], pad_id=prepared.pad_id)
        expected = reference_logits(eval_model, batch)
        student = method.export()
        total, encoder = count_parameters(student)
        metrics.update({"num_params": total, "num_params_encoder": encoder})
        save_student(student, prepared.tokenizer, student_path, prepared.task, {**metrics, "teacher_path": str(teacher.path) if teacher else None})
        lap("export")
        if verify:
            metrics["export_max_abs_diff"] = verify_export(student_path, expected, batch)
            lap("verify")
        else:  # the caller verifies later in its own fresh process (a sweep's driver)
            save_reference(output_dir / VERIFY_FILE, batch, expected)
        metrics["timings"] = timings
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2, default=str))
    return TrialOutcome(metrics=metrics, student_path=student_path)


def _node_id() -> str | None:
    """The Ray node this trial ran on (None outside Ray): which machine, for cluster debugging."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except ImportError:
        return None
