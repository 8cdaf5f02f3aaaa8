"""The stages every trial shares, each run once and cached in the work directory.

- prepare: the tokenizer (the teacher's, or one trained offline on the task's training text)
  and the tokenized Arrow dataset, keyed by a content fingerprint.
- teacher: the teacher fine-tuned on the task, keyed by (task, teacher, data fingerprint,
  fine-tuning settings); a second run with the same inputs reuses it and says so.

Cached outputs are written to a temporary folder and renamed into place, so a crash or two
processes racing never leave a half-written cache that a later run would trust.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from methods.base import MethodContext, StudentDefaults, TaskInfo
from pipeline.config import SweepSpec, TrainConfig
from pipeline.data import PreparedData, load_raw, prepare_data, train_texts
from pipeline.errors import DrydockError
from pipeline.models import load_finetuned, load_tokenizer, pretrained_loader, tokenizer_id
from pipeline.text_tokenizer import train_wordpiece

if TYPE_CHECKING:
    from pipeline.loop import Distributed, Reporter

TEACHER_SEED = 0


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _atomic_dir(final: Path, build: Callable[[Path], None]) -> Path:
    """Build into a temporary sibling, then rename: readers see all of it or nothing."""
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{time.time_ns()}")
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another process finished first: theirs is as good as ours
            if not final.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@dataclass
class Prepared:
    tokenizer: PreTrainedTokenizerBase
    data: PreparedData
    task: TaskInfo

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id or 0)


def task_info(data: PreparedData) -> TaskInfo:
    t = data.task
    return TaskInfo(name=t.name, num_labels=t.num_labels, regression=t.regression, label_names=tuple(t.label_names or ()))


def resolve_tokenizer(spec: SweepSpec, cache: Path) -> PreTrainedTokenizerBase:
    settings = spec.teacher.tokenizer
    if settings is None:
        return load_tokenizer(spec.teacher.finetuned or spec.teacher.model)
    # Trained offline on the training text: the key covers the text itself and the settings.
    raw = load_raw(spec.task)
    texts = train_texts(raw)
    key = _digest({"texts": hashlib.sha256("\n".join(texts).encode()).hexdigest(), "settings": settings.model_dump()})

    def build(tmp: Path) -> None:
        train_wordpiece(texts, vocab_size=settings.vocab_size, lowercase=settings.lowercase).save_pretrained(tmp)

    return AutoTokenizer.from_pretrained(str(_atomic_dir(cache / f"tokenizer-{key}", build)))


def prepare(spec: SweepSpec, workdir: Path) -> Prepared:
    cache = workdir / "cache"
    tokenizer = resolve_tokenizer(spec, cache)
    data = prepare_data(spec.task, tokenizer, cache)
    return Prepared(tokenizer=tokenizer, data=data, task=task_info(data))


def method_context(
    spec: SweepSpec,
    prepared: Prepared,
    teacher: PreTrainedModel | None,
    seed: int,
    learning_rate: float | None = None,
    cache_dir: Path | None = None,
    cache_scope: str = "",
) -> MethodContext:
    s = spec.student
    return MethodContext(
        task=prepared.task,
        teacher=teacher,
        load_pretrained=pretrained_loader(spec.teacher, prepared.task, len(prepared.tokenizer)),
        student=StudentDefaults(
            num_layers=s.num_layers,
            layers=tuple(s.layers) if s.layers else None,
            hidden_size=s.hidden_size,
            num_heads=s.num_heads,
            intermediate_size=s.intermediate_size,
        ),
        learning_rate=learning_rate or spec.train.learning_rate,
        weight_decay=spec.train.weight_decay,
        warmup_ratio=spec.train.warmup_ratio,
        seed=seed,
        cache_dir=cache_dir,
        cache_scope=cache_scope,
    )


# ----------------------------------------------------------------------------------------------
# teacher
# ----------------------------------------------------------------------------------------------


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
    r = spec.resources
    if spec.train.bf16 != "off" and r.use_gpu and r.teacher_on_workers():  # bf16 autocast on the GPU workers
        content["precision"] = "bf16"
    if Path(t.model).is_dir():  # a local checkpoint updated in place at the same path is another teacher
        content["model_files"] = folder_digest(Path(t.model))
    return _digest(content)


def folder_digest(folder: Path) -> str:
    """A content hash of a model folder: every file's relative name and bytes (about 0.1 s per
    100 MB here), memoised while no file's size or modification time changes."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    signature = tuple((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _folder_digest(str(folder.resolve()), signature)


@functools.lru_cache(maxsize=16)
def _folder_digest(folder: str, signature: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in signature:
        digest.update(name.encode() + b"\0")
        with open(Path(folder) / name, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:16]


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
    final = workdir / "teachers" / key
    if (final / "teacher_metrics.json").is_file():
        return TeacherResult(final, json.loads((final / "teacher_metrics.json").read_text()), reused=True, key=key)
    return None


def finetune_teacher(
    spec: SweepSpec, prepared: Prepared, workdir: Path, dist: Distributed | None = None, reporter: Reporter | None = None
) -> TeacherResult | None:
    """Fine-tune the teacher (the `finetune` method on every layer of the pretrained checkpoint)
    and cache it under `<workdir>/teachers/<key>`. Under DDP or DeepSpeed every rank calls this;
    rank 0 writes the cache and gets the result, the other ranks get None."""
    from methods.finetune import Finetune
    from pipeline import loop
    from pipeline.export import save_student

    dist = dist or loop.Distributed()
    key = teacher_key(spec, prepared)
    final = workdir / "teachers" / key
    train = teacher_train_config(spec)
    ctx = method_context(spec, prepared, None, TEACHER_SEED, learning_rate=train.learning_rate)
    pretrained = ctx.load_pretrained()
    depth = pretrained.config.num_hidden_layers
    ctx.load_pretrained = lambda: pretrained
    method = Finetune({"init_from": "pretrained", "num_layers": depth}, ctx)
    try:
        result = loop.run(
            method, train_set=prepared.data.train, dev=prepared.data.dev, task=prepared.data.task,
            train=train, seed=TEACHER_SEED, dist=dist, reporter=reporter, pad_id=prepared.pad_id,
        )
    except loop.TrainingDiverged as e:
        raise TeacherDiverged(teacher_diverged_message(spec, str(e))) from None
    if not dist.is_main:
        return None
    metrics = {**result.best_metrics, "train_seconds": result.train_seconds, "steps": float(result.steps)}

    def build(tmp: Path) -> None:
        save_student(method.export(), prepared.tokenizer, tmp, prepared.task,
                     {"role": "teacher", "teacher": spec.teacher.model, "data_fingerprint": prepared.data.fingerprint})
        (tmp / "teacher_metrics.json").write_text(json.dumps(metrics, indent=2))

    _atomic_dir(final, build)
    return TeacherResult(final, metrics, reused=False, key=key)


def ensure_teacher(spec: SweepSpec, prepared: Prepared, workdir: Path, log: Callable[[str], None] = print) -> TeacherResult:
    """The fine-tuned teacher: given by the spec, cached, or fine-tuned now in this process and
    cached for every later trial."""
    existing = existing_teacher(spec, prepared, workdir)
    if existing is not None:
        if existing.key != "given":
            log(f"teacher: reusing the fine-tuned teacher in {existing.path} (same task, teacher, data and settings)")
        return existing
    from pipeline.loop import LocalReporter

    log(f"teacher: fine-tuning {spec.teacher.model} on {spec.task.name} (cached as {workdir / 'teachers' / teacher_key(spec, prepared)})")
    # every evaluation reaches the log: in a scheduled job's log there is no progress bar
    result = finetune_teacher(spec, prepared, workdir, reporter=LocalReporter(echo=lambda m: log(progress_line(m))))
    assert result is not None  # a single process is rank 0
    return result


def progress_line(metrics: dict[str, Any]) -> str:
    """One evaluation of the teacher, as the driver logs it."""
    scores = " ".join(f"{k.split('/', 1)[1]} {v:.4f}" for k, v in sorted(metrics.items())
                      if k.startswith("eval/") and isinstance(v, (int, float)))
    return f"teacher: step {int(metrics.get('step', 0))}: {scores}"


def primary_metric_value(metrics: dict[str, float], prepared: Prepared) -> float | None:
    return metrics.get(f"eval/{prepared.data.task.primary_metric}")

