"""The teacher stage: the teacher fine-tuned on the task once, keyed by (task, teacher, data
fingerprint, fine-tuning settings) and cached in the work directory; a second run with the same
inputs reuses it and says so. The same code runs in the sweep's process and, under DDP or
DeepSpeed, on Ray Train workers (`pipeline.search.teacher`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel

from methods import get_method
from pipeline.config import SweepSpec, TrainConfig
from pipeline.errors import DrydockError
from pipeline.prepare.cache import atomic_dir, check_cache, digest, folder_digest, unreadable_as_damaged
from pipeline.prepare.models import load_finetuned, teacher_revision, tokenizer_id
from pipeline.prepare.revisions import source_revisions
from pipeline.prepare.stage import Prepared
from pipeline.training import engine, loop
from pipeline.training.context import method_context
from pipeline.training.export import save_student
from pipeline.workdir import TEACHERS_DIR

TEACHER_SEED = 0
TEACHER_DAMAGED = "teacher: the fine-tuned teacher in"  # how a damaged cached teacher is named (`existing_teacher`)






@dataclass
class TeacherResult:
    path: Path
    metrics: dict[str, float]
    reused: bool
    key: str

    def load(self) -> PreTrainedModel:
        return load_finetuned(self.path)


class TeacherDiverged(DrydockError):
    """The teacher's loss went NaN or infinite: the spec's fine-tuning settings are the cause (a
    learning rate too high for the model), so it is the user's to change, and running the same
    settings again — a Train retry, or the next sweep — would diverge again."""


def teacher_diverged_message(spec: SweepSpec, reason: str) -> str:
    return (f"teacher: fine-tuning {spec.teacher.model} diverged ({reason}); "
            f"teacher.finetune.learning_rate is {spec.teacher.finetune.learning_rate:g}: try a lower one")


def teacher_key(spec: SweepSpec, prepared: Prepared) -> str:
    """Everything that decides the fine-tuned teacher's weights. Settings added to the key after
    caches existed enter it only when they differ from their defaults, so those caches stay valid."""
    t = spec.teacher
    content: dict[str, Any] = {
        "task": spec.task.name,
        "teacher": t.model,
        "architecture": t.architecture.model_dump() if t.architecture else None,
        "data": prepared.data.fingerprint,
        "tokenizer": tokenizer_id(prepared.tokenizer),
        "finetune": t.finetune.model_dump(),
        "seed": TEACHER_SEED,
    }
    # the teacher also trains with these of spec.train (teacher_train_config)
    if spec.train.max_grad_norm != TrainConfig.model_fields["max_grad_norm"].default:
        content["max_grad_norm"] = spec.train.max_grad_norm
    if spec.train.group_by_length:
        content["group_by_length"] = True
    r = spec.resources
    # bf16 wherever `on` says so (a sweep has decided `auto` for its GPU workers by now:
    # ray_instance.resolve_bf16); `auto` left, on the GPU workers (engine._use_bf16)
    if spec.train.bf16 == "on" or (spec.train.bf16 == "auto" and r.use_gpu and r.teacher_on_workers()):
        content["precision"] = "bf16"
    if Path(t.model).is_dir():  # a local checkpoint updated in place at the same path is another teacher
        content["model_files"] = folder_digest(Path(t.model))
    revision = teacher_revision(t)
    if revision is not None:  # a hub model, by the commit it loads at: a push to its branch is another teacher
        content["revision"] = revision
    return digest(content)


def teacher_train_config(spec: SweepSpec) -> TrainConfig:
    f = spec.teacher.finetune
    return spec.train.model_copy(
        update={
            "epochs": f.epochs,
            "max_steps": f.max_steps,
            "batch_size": f.batch_size,
            "learning_rate": f.learning_rate,
            "warmup_ratio": f.warmup_ratio,
            "weight_decay": f.weight_decay,
            "eval_every": f.eval_every,
            "grad_accumulation": 1,
        }
    )


def existing_teacher(spec: SweepSpec, prepared: Prepared, workdir: Path) -> TeacherResult | None:
    """The teacher the spec gives, or the one cached for these inputs; None: it must be fine-tuned."""
    if spec.teacher.finetuned:
        path = Path(spec.teacher.finetuned)
        metrics_file = path / "teacher_metrics.json"
        metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        return TeacherResult(path, metrics, reused=True, key="given")
    key = teacher_key(spec, prepared)
    final = workdir / TEACHERS_DIR / key
    if (final / "teacher_metrics.json").is_file():
        # Checked against the manifest written with it, sizes and sha256: once per sweep, on the
        # driver (a second of hashing per GB, memoised), never at a trial's start. One written
        # before manifests: its safetensors against their headers. A damaged teacher is named,
        # not rebuilt: a rebuild is a whole fine-tune, and with a URI work location the damage
        # may be this node's mirror only (deleting it fetches the store's copy again).
        remedy = "delete that folder and run again: the teacher is fine-tuned anew"
        check_cache(final, deep=True, remedy=remedy, what=TEACHER_DAMAGED)
        with unreadable_as_damaged(final, remedy, TEACHER_DAMAGED):
            metrics = json.loads((final / "teacher_metrics.json").read_text())
        return TeacherResult(final, metrics, reused=True, key=key)
    return None


def finetune_teacher(
    spec: SweepSpec, prepared: Prepared, workdir: Path, dist: engine.Distributed | None = None, reporter: loop.Reporter | None = None,
    *, key: str | None = None,
) -> TeacherResult | None:
    """Fine-tune the teacher (the `finetune` method on every layer of the pretrained checkpoint)
    and cache it under `<workdir>/teachers/<key>`. Under DDP or DeepSpeed every rank calls this;
    rank 0 writes the cache and gets the result, the other ranks get None. `key`: the one the
    sweep computed (a Train worker on another node may not see a local teacher folder it hashes)."""
    dist = dist or engine.Distributed()
    key = key or teacher_key(spec, prepared)
    final = workdir / TEACHERS_DIR / key
    train = teacher_train_config(spec)
    ctx = method_context(spec, prepared, None, learning_rate=train.learning_rate)
    # A pretrained checkpoint has no head for the task: transformers draws it from torch's global
    # generator as it loads. Seeded here, the spec and the data decide the teacher, as its key
    # says, whatever this process drew before (a notebook, the CLI, a Train worker).
    loop.seed_everything(TEACHER_SEED)  # every rank the same head
    pretrained = ctx.load_pretrained()
    depth = pretrained.config.num_hidden_layers
    ctx.load_pretrained = lambda: pretrained
    method = get_method("finetune")({"init_from": "pretrained", "num_layers": depth}, ctx)
    try:
        result = loop.run(
            method, train_set=prepared.data.train, dev=prepared.data.dev, task=prepared.data.task,
            train=train, seed=TEACHER_SEED, dist=dist, reporter=reporter, pad_id=prepared.pad_id, progress_label="teacher",
        )
    except loop.TrainingDiverged as e:
        raise TeacherDiverged(teacher_diverged_message(spec, str(e))) from None
    if not dist.is_main:
        return None
    metrics = {**result.best_metrics, "train_seconds": result.train_seconds, "steps": float(result.steps)}

    def build(tmp: Path) -> None:
        save_student(method.export(), prepared.tokenizer, tmp, prepared.task,
                     {"role": "teacher", "teacher": spec.teacher.model, "data_fingerprint": prepared.data.fingerprint,
                      **source_revisions(spec, prepared.data.revision)})
        (tmp / "teacher_metrics.json").write_text(json.dumps(metrics, indent=2))

    atomic_dir(final, build)  # with its manifest (sizes, sha256), which `existing_teacher` checks on reuse
    return TeacherResult(final, metrics, reused=False, key=key)


def ensure_teacher(spec: SweepSpec, prepared: Prepared, workdir: Path, log: Callable[[str], None] = print) -> TeacherResult:
    """The fine-tuned teacher: given by the spec, cached, or fine-tuned now in this process and
    cached for every later trial."""
    existing = existing_teacher(spec, prepared, workdir)
    if existing is not None:
        if existing.key != "given":
            log(f"teacher: reusing the fine-tuned teacher in {existing.path} (same task, teacher, data and settings)")
        return existing
    log(f"teacher: fine-tuning {spec.teacher.model} on {spec.task.name} (cached as {workdir / 'teachers' / teacher_key(spec, prepared)})")
    # every evaluation reaches the log as it happens; between them the loop shows its steps
    # (pipeline.training.step_bar: a bar on a terminal, a heartbeat line in a log)
    result = finetune_teacher(spec, prepared, workdir, reporter=loop.LocalReporter(echo=lambda m: log(progress_line(m))))
    assert result is not None  # a single process is rank 0
    return result


def progress_line(metrics: dict[str, Any]) -> str:
    """One evaluation of the teacher, as the driver logs it."""
    scores = " ".join(f"{k.split('/', 1)[1]} {v:.4f}" for k, v in sorted(metrics.items())
                      if k.startswith("eval/") and isinstance(v, (int, float)))
    return f"teacher: step {int(metrics.get('step', 0))}: {scores}"
