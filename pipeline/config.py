"""The sweep spec: one YAML file that says what to compress, how, and where to run it.

The field names are the public contract (README, "The sweep spec"): users' specs and scripts depend on
them, so fields may be added but never renamed without a migration message. Every model is
frozen and rejects unknown keys, so a typo in a spec fails in `drydock validate` instead of being
silently ignored three hours into a sweep.

Loading goes: safe YAML → `${VAR}` expansion (an unset variable is an error naming the field;
`${VAR:-default}` gives a default) → `--set a.b=value` overrides → pydantic validation → a check
of every method's parameters against that method's own parameter model. All problems are
collected and reported together, one line each, as `field.path: what was expected`.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import itertools
import json
import math
import os
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, TypeGuard

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pipeline.errors import SpecError
from pipeline.measure.runtimes import DEFAULT_RUNTIMES, EAGER, RuntimeName
from pipeline.workdir import Counts

# What a field counts for in a run's records (`pipeline.workdir.Counts`): `--resume` and the
# fingerprint `drydock retrain` compares. Unmarked fields count for both.
HOW_IT_RUNS = Counts(resume=False, retrain=False)  # how or where a run runs, not what it studies
# where the same study runs or keeps its records, or where an input lies (retrain fingerprints its
# contents instead); a resumed run still keeps it
NOT_FINGERPRINTED = Counts(retrain=False)
KEPT_BY_THE_RUN = Counts(resume=False)  # a hub commit: a resumed run keeps the one it started with
ADDED_LATER = Counts(added_later=True)  # at the value a spec written before it gets: the old fingerprint

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")


class _Model(BaseModel):
    # allow_inf_nan=False: no field of a spec means anything at infinity (`.inf` epochs never end,
    # a `.inf` learning rate diverges at the first step); null is how a field says "no limit"
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


PositiveInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]

# Limits that keep a spec from failing (or exhausting the machine) after work has started.
MAX_SEED = 2**32 - 1  # numpy's seeds are 32-bit (torch's 64): every seed a spec gives must fit both
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
MAX_NAME_LENGTH = 64  # a sweep name becomes folder names, Ray run names and MLflow names
MAX_TRIALS = 10_000  # configurations × seeds of one sweep: every one is a row, a run and a training
MAX_SPEC_VALUES = 100_000  # values in a spec once YAML aliases are expanded
MAX_SPEC_DEPTH = 50  # levels of nesting
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _plain_name(value: str) -> str:
    """A name that is safe as a folder name and inside MLflow's filter strings (`name = '...'`)."""
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"is {len(value)} characters long; at most {MAX_NAME_LENGTH} (it names folders and MLflow objects)")
    if not _PLAIN_NAME.fullmatch(value):
        raise ValueError("may hold only letters, digits, '.', '_' and '-', starting with a letter or digit")
    return value


PlainName = Annotated[str, AfterValidator(_plain_name)]


# ----------------------------------------------------------------------------------------------
# task and data
# ----------------------------------------------------------------------------------------------


class FilesSource(_Model):
    """Local csv/tsv/jsonl/parquet files for a custom task (or a GLUE task in another layout)."""

    train: Annotated[str, NOT_FINGERPRINTED]
    dev: Annotated[str, NOT_FINGERPRINTED]
    test: Annotated[str | None, NOT_FINGERPRINTED] = None
    format: Literal["csv", "tsv", "jsonl", "parquet"] | None = None  # None: from the suffix


class SyntheticSource(_Model):
    """A small generated text classification task, so the smoke spec runs with no data at all."""

    num_train: Annotated[int, Field(gt=0, le=1_000_000)] = 512  # generated in memory, all at once
    num_dev: Annotated[int, Field(gt=0, le=1_000_000)] = 128
    num_labels: Annotated[int, Field(ge=2, le=8)] = 2
    min_words: PositiveInt = 4
    max_words: PositiveInt = 12

    @model_validator(mode="after")
    def _word_range(self) -> SyntheticSource:
        if self.min_words > self.max_words:
            raise ValueError(f"min_words ({self.min_words}) exceeds max_words ({self.max_words})")
        return self


def _revision_text(revision: Any) -> Any:
    """A revision (`teacher.revision`, `task.hub_revision`) is text as written: YAML reads a bare
    `2024` or `1.10` as a number, which no longer says which tag was meant, and an empty one says
    nothing at all."""
    if isinstance(revision, (int, float)) and not isinstance(revision, bool):
        raise ValueError(f"read as the number {revision!r}: write the branch, tag or commit in quotes")
    if isinstance(revision, str) and not revision.strip():
        raise ValueError("is empty: give a branch, tag or commit sha, or leave it out for main")
    return revision


SplitName = Annotated[str, Field(min_length=1)]


class CarvedSplit(_Model):
    """A dev split carved out of one of the dataset's splits (`dev: {from: train, fraction: 0.1}`),
    for datasets published with train and test only whose test split should stay unseen. The rows
    are drawn with `task.sample_seed`, so every process and every rerun carves the same ones, and
    the train split, when it reads the same split, no longer holds them: a dev row is never trained on."""

    # `from` is a Python keyword: the field is `from_`, written and dumped (to Ray workers) as `from`
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    from_: SplitName = Field(alias="from")
    fraction: Annotated[float, Field(gt=0, lt=1)]


class HubSplits(_Model):
    """Which split of a hub dataset each of the task's splits reads. Left out, a task split reads
    the hub's usual name (train: `train`; dev: `validation`, or MNLI's `validation_matched`;
    dev_mismatched: `validation_mismatched`); `test` is read only by `drydock eval --split test`.
    Many hub datasets (imdb, ag_news, yelp_polarity) have train and test only: `{dev: test}`."""

    train: SplitName | None = None
    dev: SplitName | CarvedSplit | None = None
    dev_mismatched: SplitName | None = None
    test: SplitName | None = None

    @field_validator("dev", mode="wrap")
    @classmethod
    def _name_or_carving(cls, value: Any, handler: Any) -> Any:
        """One error about what was meant, not one for each kind a dev split may be: a mapping is
        a carving (its ValidationError keeps its own field paths), anything else a split name."""
        if isinstance(value, dict):
            return handler(CarvedSplit.model_validate(value))
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty: name one of the dataset's splits")
        if value is not None and not isinstance(value, (str, CarvedSplit)):
            raise ValueError("expected a split name, or a carving `{from: <split>, fraction: <between 0 and 1>}`")
        return handler(value)

    @model_validator(mode="after")
    def _dev_is_not_training_data(self) -> HubSplits:
        """Evaluating on the rows trained on would report memorisation as accuracy."""
        train = self.train or "train"
        for field in ("dev", "dev_mismatched"):
            if getattr(self, field) == train:
                raise ValueError(f"{field} reads split {train!r}, which train reads too; map {field} to another split, "
                                 f"or carve it out of {train!r}: `{field}: {{from: {train}, fraction: 0.1}}`")
        return self


class TaskConfig(_Model):
    name: str
    source: Literal["hub", "glue_dir", "files", "synthetic", "auto"] = "hub"
    # hub: datasets.load_dataset(hub_path, hub_config (default: the GLUE config for GLUE tasks),
    # revision=<the commit hub_revision names>). hub_revision is a branch, tag or commit of the
    # dataset repository (None: main), resolved to a commit when a sweep starts; that commit is
    # what is loaded, fingerprinted (a push is a change `drydock retrain` sees) and recorded.
    hub_path: str = "nyu-mll/glue"
    hub_config: str | None = None
    hub_revision: Annotated[str | None, KEPT_BY_THE_RUN] = None
    # hub: the dataset split each task split reads, for datasets without a `validation` split
    # (`{dev: test}`, or a seeded `{dev: {from: train, fraction: 0.1}}`); None: the hub's usual names
    splits: HubSplits | None = None
    glue_dir: Annotated[str | None, NOT_FINGERPRINTED] = None  # the folder holding SST-2/, RTE/, ... (or the task folder itself)
    files: FilesSource | None = None
    synthetic: SyntheticSource = SyntheticSource()
    # custom tasks (and GLUE tasks read from files with other column names)
    text_columns: list[str] | None = None
    label_column: str = "label"
    # None with a hub dataset: the names of its ClassLabel column, read when the sweep pins the
    # task (`pipeline.prepare.hub_datasets.pinned_task`) and written into the spec every stage receives
    label_names: list[str] | None = None
    num_labels: PositiveInt | None = None
    regression: bool = False
    metrics: list[str] | None = None
    max_seq_length: PositiveInt = 128
    max_train_samples: PositiveInt | None = None
    max_eval_samples: PositiveInt | None = None
    sample_seed: Seed = 0

    @field_validator("name")
    @classmethod
    def _lower(cls, v: str) -> str:
        return v.strip().lower().replace("-", "")

    @field_validator("hub_revision", mode="before")
    @classmethod
    def _revision_as_written(cls, revision: Any) -> Any:
        return _revision_text(revision)

    @model_validator(mode="after")
    def _source_fields(self) -> TaskConfig:
        if self.source == "glue_dir" and not self.glue_dir:
            raise ValueError("source 'glue_dir' needs task.glue_dir (a folder in the GLUE layout)")
        if self.source == "files" and self.files is None:
            raise ValueError("source 'files' needs task.files with train and dev paths")
        if self.source == "glue_dir" and self.name not in GLUE_TASKS:
            raise ValueError(f"source 'glue_dir' needs a GLUE task name, one of {', '.join(GLUE_TASKS)}")
        if self.hub_revision is not None and self.source in ("glue_dir", "files", "synthetic"):
            raise ValueError(f"task.hub_revision only applies to source 'hub' (or 'auto'); source {self.source!r} has no revisions")
        if self.splits is not None and self.source in ("glue_dir", "files", "synthetic"):
            raise ValueError(f"task.splits only applies to source 'hub' (or 'auto'); source {self.source!r} names its splits itself")
        if self.splits is not None and self.splits.dev_mismatched is not None and self.name != "mnli":
            raise ValueError(f"task.splits.dev_mismatched only applies to mnli (task {self.name!r} has one dev split)")
        custom = self.name not in GLUE_TASKS and self.source != "synthetic"
        if custom and not self.text_columns:
            raise ValueError(f"custom task {self.name!r} needs task.text_columns (not a GLUE task: {', '.join(GLUE_TASKS)})")
        # a hub dataset (hub, or auto for a custom task) may name its labels itself, in a ClassLabel
        # column: whether it does is known once it is read (`pinned_task`); files never do
        if custom and not self.regression and not (self.label_names or self.num_labels) and self.source == "files":
            raise ValueError(f"custom classification task {self.name!r} needs task.label_names or task.num_labels "
                             "(files name no labels; a hub dataset's ClassLabel column can)")
        return self

    def resolved_source(self) -> str:
        """`auto` reads the GLUE directory when one is given and exists, else the hub."""
        if self.source != "auto":
            return self.source
        return "glue_dir" if self.name in GLUE_TASKS and self.glue_dir and Path(self.glue_dir).is_dir() else "hub"


# ----------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------


class ArchitectureConfig(_Model):
    """A BERT config small enough to describe in a spec (random initialisation)."""

    num_layers: PositiveInt = 4
    hidden_size: PositiveInt = 32
    num_heads: PositiveInt = 4
    intermediate_size: PositiveInt = 64
    max_position_embeddings: PositiveInt = 512

    @model_validator(mode="after")
    def _heads_divide(self) -> ArchitectureConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        return self


class TokenizerConfig(_Model):
    """A WordPiece tokenizer trained offline on the task's training text (tests, smoke runs)."""

    vocab_size: Annotated[int, Field(ge=32)] = 256
    lowercase: bool = True


class FinetuneSettings(_Model):
    epochs: PositiveFloat = 3.0
    max_steps: PositiveInt | None = None
    batch_size: PositiveInt = 32
    learning_rate: PositiveFloat = 5e-5
    warmup_ratio: Fraction = 0.1
    weight_decay: Annotated[float, Field(ge=0)] = 0.01
    eval_every: PositiveInt | None = None  # None: at the end of each epoch


class TeacherConfig(_Model):
    # hub name, local path, `pkg:<module>/<folder>`, or `random` (built from `architecture`)
    model: str
    architecture: ArchitectureConfig | None = None
    # None: the tokenizer shipped with the model; a TokenizerConfig: trained offline on the data
    tokenizer: TokenizerConfig | None = None
    finetune: FinetuneSettings = FinetuneSettings()
    finetuned: Annotated[str | None, NOT_FINGERPRINTED] = None  # a fine-tuned teacher folder: skips the teacher stage
    # a hub model's branch, tag or commit (None: main). It is resolved to a commit when a sweep
    # starts, and that commit is what is loaded, fingerprinted (a push to the branch is a change
    # `drydock retrain` sees) and recorded; pkg:, local folders and random have no revisions.
    revision: Annotated[str | None, Counts(resume=False, added_later=True)] = None

    @model_validator(mode="before")
    @classmethod
    def _random_has_an_architecture(cls, data: Any) -> Any:
        """`random` without `architecture` is the default one (4 layers, hidden 32): the teacher
        stage builds the BERT from it, and the limits it sets are checked like any teacher's."""
        if isinstance(data, dict) and data.get("model") == "random" and data.get("architecture") is None:
            return {**data, "architecture": {}}
        return data

    @model_validator(mode="after")
    def _random_needs_arch(self) -> TeacherConfig:
        if self.model == "random" and self.tokenizer is None:
            raise ValueError("model 'random' needs teacher.tokenizer (it ships no tokenizer)")
        if self.model != "random" and self.architecture is not None:
            raise ValueError("teacher.architecture only applies to model 'random'")
        return self

    @field_validator("revision", mode="before")
    @classmethod
    def _revision_as_written(cls, revision: Any) -> Any:
        return _revision_text(revision)

    @field_validator("revision")
    @classmethod
    def _revision_needs_hub(cls, revision: str | None, info: ValidationInfo) -> str | None:
        """A revision given where there is none to choose would be silently ignored: refuse it."""
        model = info.data.get("model")
        if revision is None or model is None:
            return revision
        local = model.startswith((".", "/", "~")) or Path(os.path.expanduser(model)).is_dir()
        if model == "random" or model.startswith("pkg:") or local:
            kind = "'random'" if model == "random" else f"{model!r} ({'an installed package' if model.startswith('pkg:') else 'a local folder'})"
            raise ValueError(f"only applies to a hub model; teacher.model {kind} has no revisions (remove teacher.revision)")
        return revision


class StudentConfig(_Model):
    """Defaults for methods that build a smaller student; a method's own params override them."""

    num_layers: PositiveInt | None = None  # bottom k teacher layers (default: half the teacher)
    layers: list[NonNegInt] | None = None  # explicit teacher layer indices to keep
    hidden_size: PositiveInt | None = None  # set to build a narrower student from a config
    num_heads: PositiveInt | None = None
    intermediate_size: PositiveInt | None = None

    @model_validator(mode="after")
    def _layers_consistent(self) -> StudentConfig:
        if self.layers is not None:
            if len(self.layers) == 0:
                raise ValueError("student.layers must not be empty")
            if sorted(set(self.layers)) != list(self.layers):
                raise ValueError("student.layers must be strictly increasing teacher layer indices")
            if self.num_layers is not None and self.num_layers != len(self.layers):
                raise ValueError("student.num_layers disagrees with the length of student.layers")
        return self


class TrainConfig(_Model):
    epochs: PositiveFloat = 3.0
    max_steps: PositiveInt | None = None  # caps the total optimizer steps of a trial
    batch_size: PositiveInt = 32  # global batch (split across workers)
    eval_batch_size: PositiveInt = 128
    learning_rate: PositiveFloat = 5e-5
    weight_decay: Annotated[float, Field(ge=0)] = 0.01
    warmup_ratio: Fraction = 0.1
    max_grad_norm: Annotated[float, Field(ge=0)] = 1.0  # 0 disables clipping
    grad_accumulation: PositiveInt = 1
    eval_every: PositiveInt | None = None  # steps; None: at the end of every epoch
    bf16: Literal["auto", "on", "off"] = "auto"  # auto: bf16 autocast on a GPU with bf16 in hardware (8.0+)
    progress_bar: bool = True
    # Checkpoints of one trial kept on disk, the latest always among them. 1: every checkpoint
    # also holds the best evaluation's state, so resuming and the best export only ever need the
    # latest, and each is up to ~2x the weights plus AdamW's state (benchmarks/RESULTS.md,
    # "Checkpoint bytes per evaluation"); more only keeps earlier snapshots to look at. Ray deletes
    # the older one only after the newer one is saved. How runs keep files, not what they train:
    # `--resume` and `drydock retrain` ignore it.
    keep_checkpoints: Annotated[PositiveInt, HOW_IT_RUNS] = 1

    @field_validator("bf16", mode="before")
    @classmethod
    def _bool_is_on_or_off(cls, v: Any) -> Any:
        # `bf16: true` is how Hugging Face's TrainingArguments spell it; take it as "on"
        return ("on" if v else "off") if isinstance(v, bool) else v


# ----------------------------------------------------------------------------------------------
# search, resources, tracking, selection
# ----------------------------------------------------------------------------------------------


class AshaConfig(_Model):
    # Epochs of labeled training (train.epochs' unit, not evaluations) before ASHA may stop a
    # trial. ASHA's time axis is the fraction of its labeled training a trial has done
    # (`progress`); pipeline.search.tuner.scheduler converts it to min(grace_period, train.epochs) / train.epochs.
    grace_period: PositiveInt = 1
    reduction_factor: Annotated[float, Field(gt=1)] = 2.0


class SearchConfig(_Model):
    scheduler: Literal["fifo", "asha"] = "fifo"
    num_samples: Annotated[int, Field(gt=0, le=MAX_TRIALS)] = 1
    max_concurrent_trials: PositiveInt | None = None
    asha: AshaConfig = AshaConfig()
    max_failures: NonNegInt = 1
    sample_seed: Seed = 0


class DeepSpeedConfig(_Model):
    # 3 partitions the student's weights too (docs/stack-facts.md, "ZeRO-3"): the loop gathers
    # them for evaluation, checkpoints and export; the frozen teacher stays outside the engine
    zero_stage: Annotated[int, Field(ge=0, le=3)] = 1
    preset: str | None = None  # a DeepSpeed JSON file merged under the generated config


class ResourcesConfig(_Model):
    workers_per_trial: PositiveInt = 1
    use_gpu: bool = False
    cpus_per_worker: PositiveFloat = 1.0
    gpus_per_worker: PositiveFloat = 1.0
    strategy: Literal["ddp", "deepspeed"] = "ddp"
    deepspeed: DeepSpeedConfig = DeepSpeedConfig()
    address: str | None = None  # a Ray cluster; None: RAY_ADDRESS or a local instance
    storage_path: str | None = None  # shared path or URI for checkpoints; None: the workdir
    # Where the teacher is fine-tuned (when not cached): `driver` in the sweep's own process, or
    # `workers`: one Ray Train run with a trial's workers, GPUs and strategy. auto: workers when
    # trials use GPUs (the driver sits on a cluster's head node, which has none), else driver.
    teacher_placement: Literal["auto", "driver", "workers"] = "auto"
    # How long, in all, one Train run (a trial, the teacher on workers) may wait for its workers'
    # resources before it fails: the time a cluster's autoscaler gets to add nodes. 30 minutes
    # covers a GPU node's start (machine, image pull, `ray start`) with room to spare, and still
    # ends a request no node can ever hold instead of waiting for ever; null waits without limit.
    # Ray's own limit is 60 s (docs/stack-facts.md, "worker-start-timeout").
    start_patience_s: PositiveFloat | None = 1800.0

    @field_validator("gpus_per_worker")
    @classmethod
    def _whole_gpus_for_the_ranks_of_a_trial(cls, gpus: float, info: ValidationInfo) -> float:
        """The ranks of one trial talk over NCCL, which refuses two ranks on one GPU: a fraction
        (or 1.5) would let Ray place two of them on the same device. Alone, a trial may take a
        fraction, and trials then share GPUs (they never talk to each other)."""
        if info.data.get("use_gpu") and info.data.get("workers_per_trial", 1) > 1 and gpus != int(gpus):
            raise ValueError(f"{gpus:g} GPUs per worker would put two ranks of a trial on one GPU, which NCCL "
                             "refuses; give each worker whole GPUs (1 or more), or use one worker per trial")
        return gpus

    @field_validator("start_patience_s")
    @classmethod
    def _finite_patience(cls, seconds: float | None) -> float | None:
        """Ray takes the wait as whole seconds in a 64-bit integer, which infinity overflows (and
        an overflow there reads as "not ready": the run would fail at once); null says "no limit"."""
        if seconds is not None and math.isinf(seconds):
            raise ValueError("must be a finite number of seconds; null waits for the workers without limit")
        return seconds

    def teacher_on_workers(self) -> bool:
        return self.teacher_placement == "workers" or (self.teacher_placement == "auto" and self.use_gpu)


class TrackingConfig(_Model):
    uri: str | None = None  # None: MLFLOW_TRACKING_URI, else sqlite:///<workdir>/mlflow.db
    experiment: Annotated[str, Field(max_length=256)] | None = None  # None: the sweep name
    # None: "<sweep name>-student". Plain characters only: it is quoted in MLflow's filter strings
    registered_model: PlainName | None = None


# The runtimes a student (and the teacher) can be timed and served in (`selection.runtimes`), and
# each device's default list: `pipeline.measure.runtimes`, the one place they are named.
_SHAPE_TEXT = re.compile(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*")
DEFAULT_SHAPES = ("1x128", "32x64")  # `selection.latency.shapes`: online traffic (batch 1), and batches
DEFAULT_FRONT = (32, 64)  # `selection.latency.front_shape` (batch_size, seq_length) when the spec names none
_FRONT_FIELDS = frozenset({"batch_size", "seq_length", "front_shape", "shapes"})


class Shape(_Model):
    """One input shape the select stage times: `batch_size` rows of `seq_length` tokens. Written
    `{batch_size: 1, seq_length: 128}` or as the text "1x128" (batch x length)."""

    batch_size: PositiveInt
    seq_length: PositiveInt

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        if isinstance(data, str):
            match = _SHAPE_TEXT.fullmatch(data)
            if not match:
                raise ValueError('expected BATCHxLENGTH, e.g. "1x128", or {batch_size: 1, seq_length: 128}')
            return {"batch_size": int(match[1]), "seq_length": int(match[2])}
        return data

    @property
    def label(self) -> str:
        """"1x128": how reports, logs and variants.parquet's column names (`latency_ms@1x128`) write it."""
        return f"{self.batch_size}x{self.seq_length}"

    def __str__(self) -> str:
        return self.label


def _shape_pair(value: Any) -> tuple[int, int] | None:
    """(batch, length) of a shape as a spec writes it, or None when it is not a valid one (its
    own field's validation then says why)."""
    try:
        shape = value if isinstance(value, Shape) else Shape.model_validate(value)
    except ValidationError:
        return None
    return shape.batch_size, shape.seq_length


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class LatencyConfig(_Model):
    """`selection.latency`: how and where the select stage times the students and the teacher
    (`pipeline.measure.latency` says which nodes each setting picks).

    Shapes: every variant is timed at each of `shapes` (default batch 1 × 128 tokens, what online
    traffic sends, and 32 × 64); the front and the latency budget use `front_shape`, which
    `batch_size` × `seq_length` (the one shape timed before `shapes` existed) name too. The front
    is, in this order:

    - `front_shape` when set (`batch_size`/`seq_length` are taken from it; setting both to
      different shapes is an error, and so is a `front_shape` that `shapes` does not list);
    - else `batch_size` × `seq_length` when either is set (the other at its default, 32 or 64), so
      a spec written before `shapes` existed keeps its front where it was; it is added to `shapes`
      when they do not list it;
    - else, when `shapes` is listed: its only shape (`shapes: [1x128]` times 1 × 128 alone, with
      the front there), or 32x64 (the default front) when listed among several; several shapes
      without 32x64 are an error asking for `front_shape` (no order of a list says which shape
      the budget means, and a guess would move it);
    - else the default, 32x64.

    The three fields always agree: validation ties them, and `model_copy` validates a copy that
    updates any of them (or `shapes`) again (a plain copy would let them disagree).
    """

    device: Literal["cpu", "cuda"] = "cpu"
    batch_size: PositiveInt = DEFAULT_FRONT[0]  # the front's shape (`front_shape`), as fields
    seq_length: PositiveInt = DEFAULT_FRONT[1]
    shapes: Annotated[list[Shape], Field(min_length=1), ADDED_LATER] = [Shape.model_validate(shape) for shape in DEFAULT_SHAPES]
    # not in the fingerprint: batch_size and seq_length, which are, name it
    front_shape: Annotated[Shape, NOT_FINGERPRINTED] = Shape(batch_size=32, seq_length=64)  # see the docstring for its default
    threads: PositiveInt | None = None
    warmup: NonNegInt = 3
    min_runs: PositiveInt = 10
    min_seconds: PositiveFloat = 2.0
    # Ray's name of the accelerator type to time on ("A100", "T4", "H100": the `accelerator_type:<name>`
    # resource Ray puts on a GPU node); None: the cluster's only type (cuda with several is an error)
    accelerator_type: Annotated[Annotated[str, Field(min_length=1, pattern=r"^[^:\s]+$")] | None, NOT_FINGERPRINTED] = None
    # False: one export per configuration, the seed the registry would serve; True: every seed
    all_seeds: Annotated[bool, ADDED_LATER] = False

    @model_validator(mode="before")
    @classmethod
    def _front_shape_of_fields(cls, data: Any) -> Any:
        """Tie `front_shape` to `batch_size` × `seq_length` (the class docstring says how). Values
        that are not valid are left as given, for their own fields to report."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("front_shape") is not None:
            pair = _shape_pair(data["front_shape"])
            if pair is not None:
                data.setdefault("batch_size", pair[0])
                data.setdefault("seq_length", pair[1])
            return data
        data.pop("front_shape", None)
        shapes = data.get("shapes", list(DEFAULT_SHAPES))
        if "batch_size" not in data and "seq_length" not in data and "shapes" in data:
            return cls._front_of_shapes(data, shapes)
        batch, length = data.get("batch_size", DEFAULT_FRONT[0]), data.get("seq_length", DEFAULT_FRONT[1])
        if not (_positive_int(batch) and _positive_int(length)):
            return data
        data["front_shape"] = {"batch_size": batch, "seq_length": length}
        pairs = [_shape_pair(shape) for shape in shapes] if isinstance(shapes, list) else [None]
        if None not in pairs and (batch, length) not in pairs:
            data["shapes"] = [*shapes, {"batch_size": batch, "seq_length": length}]
        return data

    @staticmethod
    def _front_of_shapes(data: dict[str, Any], shapes: Any) -> dict[str, Any]:
        """The front of a spec that lists `shapes` and names none (the class docstring says which)."""
        pairs = [_shape_pair(shape) for shape in shapes] if isinstance(shapes, list) else [None]
        distinct = [pair for pair in dict.fromkeys(pairs) if pair is not None]
        if not distinct or None in pairs:  # no shape, or one that is not valid: its field says so
            return data
        if len(distinct) == 1:
            front = distinct[0]
        elif DEFAULT_FRONT in distinct:
            front = DEFAULT_FRONT
        else:
            labels = ", ".join(f"{batch}x{length}" for batch, length in distinct)
            raise ValueError(f"shapes lists {labels} and no front_shape: set selection.latency.front_shape to the "
                             "one of them the variants' front and the latency budget use")
        data["front_shape"] = {"batch_size": front[0], "seq_length": front[1]}
        data["batch_size"], data["seq_length"] = front
        return data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; one that updates the front's shape (`front_shape`, or `batch_size` /
        `seq_length`) or `shapes` is validated again, as a spec with those values would be: the
        fields not updated keep their values, except the front's other name (updating
        `front_shape` sets `batch_size`/`seq_length` from it, and updating either of those moves
        `front_shape`), so they never disagree."""
        if not update or not _FRONT_FIELDS.intersection(update):
            return super().model_copy(update=update, deep=deep)
        data = self.model_dump()
        if "front_shape" in update:
            data = {k: v for k, v in data.items() if k not in ("batch_size", "seq_length")}
        elif "batch_size" in update or "seq_length" in update:
            del data["front_shape"]
        return self.model_validate({**data, **update})

    @field_validator("shapes")
    @classmethod
    def _distinct_shapes(cls, shapes: list[Shape]) -> list[Shape]:
        for i, shape in enumerate(shapes):
            if shape in shapes[:i]:
                raise ValueError(f"{shape} is listed twice")
        return shapes

    @field_validator("front_shape")
    @classmethod
    def _front_shape_is_timed(cls, front: Shape, info: ValidationInfo) -> Shape:
        shapes = info.data.get("shapes")
        if shapes is not None and front not in shapes:
            raise ValueError(f"{front} is not one of selection.latency.shapes ({', '.join(map(str, shapes))}); "
                             "the front's shape must be timed: add it there, or pick one of those")
        differ = [f"selection.latency.{name} ({info.data[name]})" for name in ("batch_size", "seq_length")
                  if info.data.get(name) is not None and info.data[name] != getattr(front, name)]
        if differ:
            raise ValueError(f"{front} disagrees with {' and '.join(differ)} (batch_size and seq_length name the "
                             "front's shape too); set only front_shape, or the same shape in both")
        return front


class SelectionConfig(_Model):
    latency: LatencyConfig = LatencyConfig()
    # the runtime variants of every student and of the teacher that are built, scored, timed and
    # placed on the front (`pipeline.select.variants`); default: DEFAULT_RUNTIMES of the device
    # (`pipeline.measure.runtimes`)
    runtimes: Annotated[list[RuntimeName], ADDED_LATER] = list(DEFAULT_RUNTIMES["cpu"])  # on cuda: DEFAULT_RUNTIMES["cuda"] (`_device_default`)
    max_latency_ms: PositiveFloat | None = None
    min_speedup: PositiveFloat | None = None
    size_objective: bool = False

    @model_validator(mode="before")
    @classmethod
    def _device_default(cls, data: Any) -> Any:
        """No `runtimes` given: DEFAULT_RUNTIMES of the device (cpu where the device is not valid:
        `latency` reports that itself)."""
        if not isinstance(data, dict) or data.get("runtimes") is not None:
            return data
        latency = data.get("latency")
        device = latency.device if isinstance(latency, LatencyConfig) else None
        if isinstance(latency, dict):
            device = latency.get("device")
        return {**data, "runtimes": list(DEFAULT_RUNTIMES["cuda" if device == "cuda" else "cpu"])}

    @field_validator("runtimes")
    @classmethod
    def _runtimes(cls, runtimes: list[RuntimeName], info: ValidationInfo) -> list[RuntimeName]:
        """No repeats; `torch` always (added first when missing).

        `torch` is added rather than refused: eager fp32 is timed whatever the list says —
        results.parquet's latency columns are eager fp32 (its contract), and every `speedup` is
        over the teacher in eager fp32, what the user runs today — so requiring it in the list
        would only make every spec repeat a fixed requirement; a list without it reads as "also
        these", and a spec dumped after validation (`spec_to_dict`) shows it."""
        for i, runtime in enumerate(runtimes):
            if runtime in runtimes[:i]:
                raise ValueError(f"{runtime!r} is listed twice")
        return runtimes if EAGER in runtimes else [EAGER, *runtimes]


# ----------------------------------------------------------------------------------------------
# search domains and the methods' parameter spaces
# ----------------------------------------------------------------------------------------------


class Domain(BaseModel):
    """A method parameter given as a search domain, `{<kind>: <argument>}`.

    Infinite values are let through here so that the parameter's check names them the way it
    names a fixed value (`must be a finite number`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: ClassVar[str]

    @property
    def argument(self) -> Any:
        return getattr(self, self.kind)

    def candidates(self) -> list[Any]:
        """Values to validate the domain with: every grid/choice value, or both ends of a range."""
        return list(self.argument)

    def typical_draw(self) -> float | None:
        """A draw to validate beside the candidates (None where the candidates are every draw)."""
        return None

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        arg = data.get(cls.kind) if isinstance(data, dict) else None
        problem = cls._shape_problem(arg)
        if problem:
            raise ValueError(problem)
        return data

    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        return None


class _Listed(Domain):
    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        return None if isinstance(arg, list | tuple) and arg else f"{cls.kind} needs a non-empty list"


class Grid(_Listed):
    """Every value, each a configuration of its own (the grids of a method multiply)."""

    kind: ClassVar[str] = "grid"
    grid: list[Any]


class Choice(_Listed):
    """One value drawn per sample."""

    kind: ClassVar[str] = "choice"
    choice: list[Any]

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.choice)


Number = int | float  # a bound as written: `[1, 3]` stays integers in the spec's dump


class _Range(Domain):
    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        if not (isinstance(arg, list | tuple) and len(arg) == 2 and all(isinstance(a, int | float) for a in arg)):
            return f"{cls.kind} needs [low, high]"
        low, high = arg
        if not low < high:
            return f"{cls.kind} needs low < high, got [{low}, {high}]"
        return None

    @property
    def low(self) -> Number:
        return self.argument[0]

    @property
    def high(self) -> Number:
        return self.argument[1]

    def typical_draw(self) -> float | None:
        """A draw strictly inside the range and not a whole number, as nearly every real draw is.

        The bounds alone do not show what the parameter will receive: `{uniform: [1, 3]}` has
        integer bounds but draws floats like 2.69, which an integer parameter rejects."""
        draw = math.nan  # replaced on the loop's first pass
        for fraction in (0.5, 1 / 3, 0.6180339887498949):
            draw = self._at(fraction)
            if self.low < draw < self.high and not float(draw).is_integer():
                break
        return float(draw)

    def _at(self, fraction: float) -> float:
        return self.low + (self.high - self.low) * fraction

    def sample(self, rng: random.Random) -> Any:
        return rng.uniform(self.low, self.high)


class Uniform(_Range):
    kind: ClassVar[str] = "uniform"
    uniform: tuple[Number, Number]


class LogUniform(_Range):
    kind: ClassVar[str] = "loguniform"
    loguniform: tuple[Number, Number]

    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        return super()._shape_problem(arg) or (None if arg[0] > 0 else "loguniform needs a positive low bound")

    def _at(self, fraction: float) -> float:
        return math.exp(math.log(self.low) + (math.log(self.high) - math.log(self.low)) * fraction)

    def sample(self, rng: random.Random) -> Any:
        return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))


class RandInt(_Range):
    kind: ClassVar[str] = "randint"
    randint: tuple[int, int]

    @classmethod
    def _shape_problem(cls, arg: Any) -> str | None:
        problem = super()._shape_problem(arg)
        return problem or (None if all(isinstance(a, int) for a in arg) else "randint needs integer bounds")

    def candidates(self) -> list[Any]:
        return [self.low, self.high - 1]  # Tune's randint excludes the upper bound, and so does the draw

    def typical_draw(self) -> float | None:
        return None

    def sample(self, rng: random.Random) -> Any:
        return rng.randrange(*self.randint)


DOMAINS: dict[str, type[Domain]] = {d.kind: d for d in (Grid, Choice, Uniform, LogUniform, RandInt)}
DOMAIN_KINDS = tuple(DOMAINS)
Sampled = Choice | Uniform | LogUniform | RandInt  # drawn `search.num_samples` times per grid point


def is_domain(value: Any) -> TypeGuard[dict[str, Any]]:
    """A method parameter written as `{grid: [...]}` (or choice/uniform/...) is a search domain."""
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in DOMAIN_KINDS


def as_domain(value: Domain | dict[str, Any]) -> Domain:
    """The typed domain of `{kind: argument}`; a ValueError says what the argument lacks."""
    return value if isinstance(value, Domain) else DOMAINS[next(iter(value))].model_validate(value)


def domain_candidates(value: Domain | dict[str, Any]) -> list[Any]:
    return as_domain(value).candidates()


def domain_draw(value: Domain | dict[str, Any]) -> float | None:
    return as_domain(value).typical_draw()


def default_params(params: ParamSpace | dict[str, Any]) -> dict[str, Any]:
    """Fixed values only: a searched parameter falls back to the method's default.

    This is what `drydock train` runs when no `--set methods.<m>.<p>=<v>` pins a domain.
    """
    given = params.given() if isinstance(params, ParamSpace) else params
    return {k: v for k, v in given.items() if not (is_domain(v) or isinstance(v, Domain))}


# the type of the pydantic error a parameter space raises: its `lines` are the problems, each the
# text after `methods.<name>.<param>: ` (or `methods.<name>: ` for the parameters together)
PARAM_PROBLEMS = "drydock_param_problems"
# the same for the spec's whole `methods:` section, each line a whole `methods.…: …` problem
METHOD_PROBLEMS = "drydock_method_problems"


def _problems(kind: str, lines: list[str]) -> PydanticCustomError:
    return PydanticCustomError(kind, "{lines}", {"lines": lines})


class ParamSpace(BaseModel):
    """A method's parameters as the spec gives them: each a value or a search domain.

    `param_space_model` derives one per method from its `Params`, so a third-party method gets it
    without writing it. A fixed value is checked against the parameter's type and kept as written
    (the spec's dump shows what the user wrote, and the trials' configurations are validated once,
    by `Params`, where `pipeline.search.space` draws them); a domain is typed and every value it
    can give is checked. Parameters left out are the method's defaults and are never read here."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    params_model: ClassVar[type[BaseModel]] = BaseModel
    _order: tuple[str, ...] = PrivateAttr(default=())  # the parameters given, in the spec's order

    @model_validator(mode="wrap")
    @classmethod
    def _in_written_order(cls, data: Any, handler: Any) -> Any:
        """The spec's order is the draw order of the random domains and the grids' nesting: it
        decides which configurations a sweep (and a resumed one) draws."""
        space = handler(data)
        if isinstance(data, dict):
            space._order = tuple(data)
        return space

    @model_validator(mode="after")
    def _together(self) -> Self:
        """Cross-field checks of the method (a sum that must not exceed 1, two ways to give one
        setting), run when every parameter passed alone."""
        lines = _combination_problems(self.params_model, self)
        if lines:
            raise _problems(PARAM_PROBLEMS, lines)
        return self

    @model_serializer
    def _as_written(self) -> dict[str, Any]:
        return self.given()

    def given(self) -> dict[str, Any]:
        """The parameters the spec gives, values and domains, in its order."""
        return {name: getattr(self, name) for name in self._order}

    def fixed(self) -> dict[str, Any]:
        """The parameters given a value: what `drydock train` runs beside the method's defaults."""
        return {name: v for name, v in self.given().items() if not isinstance(v, Domain)}

    def domains(self) -> dict[str, Domain]:
        return {name: v for name, v in self.given().items() if isinstance(v, Domain)}

    def __getitem__(self, name: str) -> Any:
        return self.given()[name]

    def __repr_args__(self) -> Any:
        return self.given().items()

    def __reduce__(self) -> tuple[Any, ...]:
        # the class is derived at run time, so it pickles as the method's Params it is derived from
        return (_space_from_state, (self.params_model, self.__getstate__()))


def _space_from_state(params_model: type[BaseModel], state: dict[str, Any]) -> ParamSpace:
    space_cls = param_space_model(params_model)
    space = space_cls.__new__(space_cls)
    space.__setstate__(state)
    return space


@functools.cache
def param_space_model(params_model: type[BaseModel]) -> type[ParamSpace]:
    """The value-or-domain model of a method's `Params`: one field per parameter, each taking a
    value of the parameter's type or a search domain over it."""

    def check(value: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None
        return _value_or_domain(params_model, info.field_name, value)

    # `T | Domain` says what a field holds; the check is the method's own (`_value_or_domain`)
    fields: dict[str, Any] = {name: (Annotated[field.annotation | Domain, PlainValidator(check)], None)
                               for name, field in params_model.model_fields.items()}
    space: type[ParamSpace] = create_model(f"{params_model.__name__}Space", __base__=ParamSpace,
                                           __module__=ParamSpace.__module__, **fields)
    space.params_model = params_model
    return space


def _value_or_domain(model: type[BaseModel], pname: str, value: Any) -> Any:
    """`value` as the spec wrote it, or its typed domain, once every value it may give passes
    the method's own check of `pname`; else a PARAM_PROBLEMS error listing what fails."""
    domain = None
    if is_domain(value) or isinstance(value, Domain):
        try:
            domain = as_domain(value)
        except ValidationError as e:
            raise _problems(PARAM_PROBLEMS, [param_error(err) for err in e.errors()]) from None
    candidates = domain.candidates() if domain is not None else [value]
    infinite = [cand for cand in candidates if _not_finite(cand)]
    if infinite:  # a method's own Params may not say so: `temperature: .inf` is > 0
        raise _problems(PARAM_PROBLEMS, [f"must be a finite number (got {infinite[0]!r})"])
    found = [msg for cand in candidates for _, msg in _field_errors(model, pname, cand)]
    if found:
        raise _problems(PARAM_PROBLEMS, found)
    draw = domain.typical_draw() if domain is not None else None
    errors = [] if draw is None else _field_errors(model, pname, draw)
    kind = domain.kind if domain is not None else None
    if any(etype == "int_from_float" for etype, _ in errors):
        raise _problems(PARAM_PROBLEMS, [f"{kind} draws floats but {pname} takes integers; use randint or grid"])
    if errors:
        reason = "; ".join(msg for _, msg in errors)
        raise _problems(PARAM_PROBLEMS, [f"{kind} draws values inside the range that {pname} rejects: {reason}"])
    return domain if domain is not None else value


def _not_finite(value: Any) -> bool:
    """An infinite or NaN float anywhere in a parameter's value (a list of them included)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, (list, dict)) and any(_not_finite(v) for v in (value.values() if isinstance(value, dict) else value))


def _field_errors(model: type[BaseModel], pname: str, value: Any) -> list[tuple[str, str]]:
    """(type, message) of each error the method's Params model gives for `pname = value` alone.

    Errors on other fields come from cross-field checks that need the rest, so they are left out.
    """
    try:
        model.model_validate({pname: value})
    except ValidationError as e:
        return [
            (err["type"], param_error(err))
            for err in e.errors()
            if tuple(err["loc"][:1]) == (pname,)
        ]
    return []


MAX_COMBINATIONS_CHECKED = 10_000


def _combination_problems(model: type[BaseModel], space: ParamSpace) -> list[str]:
    """Cross-field checks (a sum that must not exceed 1, two ways to give one setting): the
    parameters together, for every grid and choice value and each bound of every range.

    Checking each parameter alone misses these, and the sweep would then stop at the first bad
    combination. The constraints compare or add parameters, so a range that passes at its
    bounds passes inside them; `expand_trials` still reports a draw that fails as a SpecError.
    """
    given = space.given()
    values = {k: v.candidates() if isinstance(v, Domain) else [v] for k, v in given.items()}
    searched = list(space.domains())
    found: dict[str, str] = {}
    combos = itertools.islice(itertools.product(*values.values()), MAX_COMBINATIONS_CHECKED)
    for combo in combos:
        point = dict(zip(values, combo))
        try:
            model.model_validate(point)
        except ValidationError as e:
            with_ = ", ".join(f"{k}={point[k]!r}" for k in searched)
            for err in e.errors():
                msg = param_error(err)
                found.setdefault(msg, f"{msg} (with {with_})" if with_ else msg)
    return list(found.values())


def method_spaces(raw: dict[Any, Any]) -> dict[str, ParamSpace]:
    """The spec's `methods:` section typed: each method registered, each of its parameters a
    value or a domain its `Params` accepts. Raises a METHOD_PROBLEMS error listing every problem."""
    from methods import get_method, registered_methods

    known = registered_methods()
    spaces: dict[str, ParamSpace] = {}
    lines: list[str] = []
    for name, params in raw.items():
        if name not in known:
            lines.append(f"methods.{name}: unknown method (registered: {', '.join(sorted(known))}){did_you_mean(name, known)}")
            continue
        model = param_space_model(get_method(name).Params)
        if isinstance(params, model):
            spaces[name] = params
            continue
        if not isinstance(params, dict | None):
            lines.append(f"methods.{name}: expected a mapping of parameters")
            continue
        try:
            spaces[name] = model.model_validate(params or {})
        except ValidationError as e:
            lines += _space_lines(name, model, list(params or {}), e)
    if lines:
        raise _problems(METHOD_PROBLEMS, lines)
    return spaces


def _space_lines(method: str, model: type[ParamSpace], order: list[str], error: ValidationError) -> list[str]:
    """A parameter space's errors as the spec's problems, in the order the spec gives them."""
    fields = model.model_fields
    found: list[tuple[int, str]] = []
    for err in error.errors():
        pname = str(err["loc"][0]) if err["loc"] else None
        where = f"methods.{method}.{pname}" if pname is not None else f"methods.{method}"
        rank = order.index(pname) if pname in order else len(order)
        if err["type"] == "extra_forbidden":
            found.append((rank, f"{where}: unknown parameter (known: {', '.join(fields) or 'none'}){did_you_mean(str(pname), fields)}"))
        elif err["type"] == PARAM_PROBLEMS:
            found += [(rank, f"{where}: {line}") for line in err["ctx"]["lines"]]
        else:
            found.append((rank, f"{where}: {param_error(err)}"))
    return [line for _, line in sorted(found, key=lambda item: item[0])]


# ----------------------------------------------------------------------------------------------
# the spec
# ----------------------------------------------------------------------------------------------


class SweepSpec(_Model):
    name: PlainName
    task: TaskConfig
    teacher: TeacherConfig
    student: StudentConfig = StudentConfig()
    train: TrainConfig = TrainConfig()
    seeds: list[Seed] = [0]
    methods: dict[str, ParamSpace] = {}  # none: only `drydock train --method` can use the spec
    search: SearchConfig = SearchConfig()
    resources: Annotated[ResourcesConfig, HOW_IT_RUNS] = ResourcesConfig()
    tracking: Annotated[TrackingConfig, NOT_FINGERPRINTED] = TrackingConfig()  # where its records go
    selection: SelectionConfig = SelectionConfig()

    @field_validator("methods", mode="wrap")
    @classmethod
    def _typed_methods(cls, methods: Any, handler: Any) -> dict[str, ParamSpace]:
        """Each method's parameters typed by its own value-or-domain model (`method_spaces`)."""
        return handler(method_spaces(methods) if isinstance(methods, dict) else methods)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("seeds must list at least one seed")
        if len(set(v)) != len(v):
            raise ValueError("seeds must not repeat")
        return v

    @property
    def experiment_name(self) -> str:
        return self.tracking.experiment or self.name

    @property
    def registered_model_name(self) -> str:
        return self.tracking.registered_model or f"{self.name}-student"


# ----------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand_env(node: Any, path: str, problems: list[str]) -> Any:
    if isinstance(node, dict):
        return {k: _expand_env(v, f"{path}.{k}" if path else str(k), problems) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_env(v, f"{path}[{i}]", problems) for i, v in enumerate(node)]
    if isinstance(node, str) and "${" in node:

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            value = os.environ.get(name)
            if value is None or (value == "" and default is not None):
                if default is None:
                    problems.append(f"{path}: environment variable {name} is not set (used as ${{{name}}})")
                    return ""
                return default
            return value

        expanded = _ENV.sub(sub, node)
        return None if expanded == "" and node.strip().startswith("${") else expanded
    return node


def _check_size(raw: dict[str, Any]) -> None:
    """Refuse a spec whose YAML aliases expand without limit, before anything walks it.

    PyYAML reads `*name` as the same object as its `&name` anchor, so 500 bytes of nested aliases
    load in milliseconds as a few shared lists that expand to billions of values: everything that
    walks the spec (the `${VAR}` expansion, pydantic) would run out of memory. The expanded size
    is counted here once per distinct object, so this stays as cheap as the file is small; a
    recursive alias and a nesting deeper than MAX_SPEC_DEPTH are refused too.
    """
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: Any, path: str, depth: int) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_:
            raise SpecError(f"{path}: is a recursive YAML alias (a value that contains itself); write the value out")
        if depth > MAX_SPEC_DEPTH:
            raise SpecError(f"{path}: nested more than {MAX_SPEC_DEPTH} levels deep")
        open_.add(id(node))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        total = 1 + sum(size(v, f"{path}.{k}" if isinstance(node, dict) else f"{path}[{k}]", depth + 1) for k, v in items)
        open_.discard(id(node))
        sizes[id(node)] = total
        return total

    total = sum(size(v, str(k), 1) for k, v in raw.items())
    if total <= MAX_SPEC_VALUES:
        return
    # name the innermost field that holds most of it (a grid of aliases, not the whole `methods`)
    path, node = max(((str(k), v) for k, v in raw.items()), key=lambda kv: size(kv[1], kv[0], 1))
    while True:
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        big = [(k, v) for k, v in items if 2 * size(v, "", 1) > size(node, "", 1)]
        if not big:
            break
        path = f"{path}.{big[0][0]}" if isinstance(node, dict) else f"{path}[{big[0][0]}]"
        node = big[0][1]
    raise SpecError(f"{path}: holds {size(node, path, 1):,} values once its YAML aliases (*name) are expanded; "
                    f"a spec may hold at most {MAX_SPEC_VALUES:,}")


class _SpecLoader(yaml.SafeLoader):
    """Safe YAML with YAML 1.2 booleans: only true/false are booleans.

    PyYAML follows YAML 1.1, where on/off/yes/no are booleans too, so `bf16: on` arrived as True
    and was rejected by a field whose documented values are "auto", "on", "off". Boolean fields
    lose nothing: pydantic still reads "on"/"off"/"yes"/"no" as booleans.

    A key given twice in one mapping is an error naming it and both lines (PyYAML keeps the last
    silently, so the first, often the one meant, would be ignored); `<<` merge keys may still be
    overridden. Aliases are read as PyYAML reads them (shared objects, never copied here);
    `spec_from_dict` bounds what they expand to.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {first_line[key]}; YAML would keep only the last)",
                    key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_BOOL_TAG = "tag:yaml.org,2002:bool"
_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SpecLoader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_SpecLoader)  # a SafeLoader subclass: never constructs objects


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` → (["a","b","c"], value), the value parsed as YAML (safely: never code)."""
    if "=" not in text:
        raise SpecError(f"--set {text}: expected KEY=VALUE, e.g. train.epochs=1")
    key, raw = text.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise SpecError(f"--set {text}: empty key")
    try:
        value = _load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise SpecError(f"--set {text}: value is not valid YAML ({e.__class__.__name__})") from None
    return parts, value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    for text in overrides:
        parts, value = parse_override(text)
        node = raw
        for p in parts[:-1]:
            child = node.get(p)
            if not isinstance(child, dict):
                child = {}
                node[p] = child
            node = child
        node[parts[-1]] = value
    return raw


def did_you_mean(word: str, known: Any, prefix: str = "") -> str:
    """`; did you mean <prefix><closest>?` when one of `known` is a likely typo's target, else ''.
    A typo's error names the fix, so the user never has to open the schema to find it."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The spec model a field holds (`FilesSource | None` holds FilesSource), or None for a value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_model_of, getattr(annotation, "__args__", ())) if m is not None), None)


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the spec takes beside an unknown key at `loc` (empty under a free-form mapping)."""
    model: type[BaseModel] | None = SweepSpec
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) if model is not None else None
        model = _model_of(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def _task_name_hint(err: Mapping[str, Any]) -> str:
    """A task whose name is a typo of a GLUE task's fails as a custom task (no text columns, no
    labels) or as a GLUE directory's unknown task: the error says which GLUE name was meant."""
    given = err.get("input")
    if tuple(err["loc"]) != ("task",) or not isinstance(given, dict) or not isinstance(given.get("name"), str):
        return ""
    name = given["name"].strip().lower().replace("-", "")
    return "" if name in GLUE_TASKS else did_you_mean(name, GLUE_TASKS)


def _format_error(err: Mapping[str, Any]) -> str:
    loc = ".".join(str(p) for p in err["loc"]) or "(spec)"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        *parent, key = tuple(err["loc"]) or ("",)
        hint = did_you_mean(key, _known_keys((*parent, key)), "".join(f"{p}." for p in parent))
        msg = f"unknown key (not part of the spec){hint}" if hint else "unknown key (not part of the spec; check the spelling)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):] + _task_name_hint(err)
    elif err["type"] == "finite_number":
        msg = "must be a finite number"
    given = err.get("input")
    if err["type"] not in ("extra_forbidden", "missing") and not isinstance(given, (dict, list)):
        shown = repr(given)
        msg = f"{msg} (got {shown if len(shown) <= 80 else shown[:60] + '…'})"
    return f"{loc}: {msg}"


def error_lines(error: ValidationError) -> list[str]:
    """A spec's validation errors, one `field.path: what was expected` line each (the `methods:`
    section's own problems arrive together, as one error holding their lines)."""
    lines: list[str] = []
    for err in error.errors():
        lines += err["ctx"]["lines"] if err["type"] == METHOD_PROBLEMS else [_format_error(err)]
    return lines


def param_error(err: Mapping[str, Any]) -> str:
    """A pydantic error about a method's parameters, as the text after `methods.<name>.<param>: `."""
    return _format_error({**err, "loc": ()}).split(": ", 1)[1]


def validate_methods(spec: SweepSpec) -> list[str]:
    """What a method's parameters cannot say alone: whether the spec's resources can train it.
    (Its parameters and domains were checked as the spec was typed: `method_spaces`.)"""
    from methods import get_method

    problems: list[str] = []
    resources = spec.resources
    for name in spec.methods:
        if (resources.strategy == "deepspeed" and resources.deepspeed.zero_stage == 3 and resources.workers_per_trial > 1
                and not get_method(name).same_modules_on_every_rank):
            problems.append(
                f"methods.{name}: cannot train under resources.deepspeed.zero_stage 3 with {resources.workers_per_trial} "
                f"workers: its ranks run different modules in one step, and ZeRO-3 gathers each module's weights with a "
                f"collective as it runs (the ranks would wait for each other forever); use zero_stage 2 or one worker")
    return problems


def load_spec(path: str | Path, overrides: list[str] | None = None) -> SweepSpec:
    """Read, expand, override and validate a spec; raises SpecError listing every problem."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: spec file not found")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SpecError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise SpecError(f"{path}: line {line}: byte {e.start} (0x{data[e.start]:02x}) is not UTF-8; save the spec as UTF-8") from None
    try:
        raw = _load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())  # one line, whatever PyYAML wrote
        raise SpecError(f"{path}{where}: not valid YAML ({problem})") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a spec (at most {MAX_SPEC_DEPTH} levels)") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    return spec_from_dict(raw, overrides or [])


def spec_from_dict(raw: dict[str, Any], overrides: list[str] | None = None) -> SweepSpec:
    _check_size(raw)  # before anything walks it, overrides' deep copy included
    raw = apply_overrides(raw, overrides or [])
    _check_size(raw)  # a --set value is YAML too
    problems: list[str] = []
    raw = _expand_env(raw, "", problems)
    if problems:
        raise SpecError(problems)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as e:
        raise SpecError(error_lines(e)) from None
    problems = validate_methods(spec) or trial_count_problems(spec)
    if problems:
        raise SpecError(problems)
    return spec


def trial_count(spec: SweepSpec) -> dict[str, int]:
    """Trials per method before any runs, at most (`pipeline.search.space` drops duplicate draws):
    the product of its grids' sizes, × `search.num_samples` when it has random domains, × seeds."""
    counts = {}
    for name, space in spec.methods.items():
        domains = list(space.domains().values())
        configurations = math.prod(len(d.grid) for d in domains if isinstance(d, Grid))
        if any(not isinstance(d, Grid) for d in domains):
            configurations *= spec.search.num_samples
        counts[name] = configurations * len(spec.seeds)
    return counts


def trial_count_problems(spec: SweepSpec) -> list[str]:
    """A sweep of more than MAX_TRIALS trials is refused before any work: each trial is a training
    run, a results row and an MLflow run, and the trial list itself is built in memory."""
    counts = trial_count(spec)
    total = sum(counts.values())
    if total <= MAX_TRIALS:
        return []
    sampled = spec.search.num_samples > 1 and any(
        not isinstance(d, Grid) for space in spec.methods.values() for d in space.domains().values())
    where = "search.num_samples" if sampled else "methods"
    per_method = ", ".join(f"{name}: {count:,}" for name, count in counts.items())
    return [f"{where}: the sweep would run {total:,} trials ({per_method}; with {len(spec.seeds)} seed(s)), more than the "
            f"{MAX_TRIALS:,} one sweep may hold; use fewer grid values, search.num_samples or seeds"]


def spec_to_dict(spec: SweepSpec) -> dict[str, Any]:
    """A plain dict that round-trips through `spec_from_dict` (what Ray ships to workers)."""
    return spec.model_dump(mode="json")


# ----------------------------------------------------------------------------------------------
# the teacher's own limits
# ----------------------------------------------------------------------------------------------

# model types whose position table starts after the padding index (pad_token_id + 1 slots unused)
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert")


def teacher_config(teacher: TeacherConfig) -> tuple[dict[str, Any], str] | None:
    """The teacher's shape (its config.json, or `teacher.architecture` for `random`) and where it
    was read, when that needs no network: a fine-tuned teacher folder, a `pkg:` folder, a local
    folder, or a hub model already in the local hub cache. None otherwise: nothing is downloaded.
    Read as JSON, without transformers: only the sizes the spec's checks compare are needed."""
    if teacher.model == "random" and teacher.architecture is not None and not teacher.finetuned:
        a = teacher.architecture
        return ({"num_hidden_layers": a.num_layers, "num_attention_heads": a.num_heads, "hidden_size": a.hidden_size,
                 "max_position_embeddings": a.max_position_embeddings, "model_type": "bert"}, "teacher.architecture")
    candidates = [Path(os.path.expanduser(teacher.finetuned)) / "config.json"] if teacher.finetuned else []
    ref = teacher.model
    if ref.startswith("pkg:"):
        module, _, folder = ref[4:].partition("/")
        try:
            found = importlib.util.find_spec(module) if module else None
        except (ImportError, ValueError):
            found = None
        if found is not None and found.submodule_search_locations:
            candidates.append(Path(list(found.submodule_search_locations)[0]) / folder / "config.json")
    elif ref != "random" and Path(os.path.expanduser(ref)).is_dir():
        candidates.append(Path(os.path.expanduser(ref)) / "config.json")
    elif ref != "random":
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(ref, "config.json", revision=teacher.revision)
        except Exception:  # noqa: BLE001 - a name the hub refuses is reported when the sweep loads it
            cached = None
        if isinstance(cached, str):
            candidates.append(Path(cached))
    for path in candidates:
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict):
            return config, str(path)
    return None


def teacher_problems(spec: SweepSpec) -> list[str]:
    """What the teacher's own config rules out (`drydock validate` checks it): sequences longer
    than its position table, students deeper than it, heads that do not divide a width. Each
    would fail only once the data is tokenized or the teacher fine-tuned. Not part of
    `load_spec`, which reads no file the spec names (`load_deepspeed_preset` says why)."""
    found = teacher_config(spec.teacher)
    if found is None:
        return []
    config, source = found
    ints = {k: v for k, v in config.items() if isinstance(v, int) and not isinstance(v, bool)}
    problems: list[str] = []
    positions = ints.get("max_position_embeddings")
    if positions is not None and config.get("model_type") in _OFFSET_POSITIONS:
        positions -= ints.get("pad_token_id", 1) + 1
    latency = spec.selection.latency
    # the front's shape is said once: as the fields that name it, or as the entry of `shapes` it
    # was taken from (a spec that lists shapes and names no front, `LatencyConfig`); the default
    # shapes are not the user's to fix (a teacher with fewer positions than 128 gets a
    # `latency_error` for 1x128 in variants.parquet)
    labels = [shape.label for shape in latency.shapes]
    front = latency.front_shape
    listed = labels not in (list(DEFAULT_SHAPES), [*DEFAULT_SHAPES, front.label])
    front_field = f"selection.latency.shapes.{labels.index(front.label)} ({front})" if listed else "selection.latency.seq_length"
    lengths = [("task.max_seq_length", spec.task.max_seq_length), (front_field, latency.seq_length)]
    lengths += [(f"selection.latency.shapes.{i} ({shape})", shape.seq_length) for i, shape in enumerate(latency.shapes)
                if shape.seq_length != latency.seq_length and shape.label not in DEFAULT_SHAPES]
    for field, length in lengths:
        if positions is not None and length > positions:
            problems.append(f"{field}: {length} exceeds the teacher's {positions} positions ({source}); use at most {positions}")
    depth = ints.get("num_hidden_layers")
    if depth is not None:
        problems += _depth_problems(spec, depth, source)
    hidden, heads, s = ints.get("hidden_size"), ints.get("num_attention_heads"), spec.student
    if hidden and heads and (s.hidden_size or s.num_heads) and (s.hidden_size or hidden) % (s.num_heads or heads):
        field = "student.num_heads" if s.num_heads else "student.hidden_size"
        problems.append(f"{field}: the student's hidden size {s.hidden_size or hidden} is not divisible by its "
                        f"{s.num_heads or heads} heads (an unset one is the teacher's: hidden size {hidden}, {heads} heads; {source})")
    return problems


def _depth_problems(spec: SweepSpec, depth: int, source: str) -> list[str]:
    """A student keeps at most the teacher's `depth` layers, by indices 0..depth-1: the spec's
    `student` section and every method's `num_layers` / `layers` (each value of a domain)."""
    given: list[tuple[str, Any]] = [("student.num_layers", spec.student.num_layers), ("student.layers", spec.student.layers)]
    for name, space in spec.methods.items():
        for pname in ("num_layers", "layers"):
            value = space.given().get(pname)
            for cand in value.candidates() if isinstance(value, Domain) else [value]:
                given.append((f"methods.{name}.{pname}", cand))
    problems: list[str] = []
    for field, value in given:
        if isinstance(value, int) and not isinstance(value, bool) and value > depth:
            problems.append(f"{field}: {value} layers exceed the teacher's {depth} ({source})")
        elif isinstance(value, list) and (outside := [i for i in value if isinstance(i, int) and not 0 <= i < depth]):
            problems.append(f"{field}: index {outside[0]} is not a layer of the {depth}-layer teacher "
                            f"(indices 0-{depth - 1}; {source})")
    return list(dict.fromkeys(problems))


NO_METHODS = "methods: the spec lists no method to run"  # what `drydock sweep` says too


def check_for_sweep(spec: SweepSpec) -> None:
    """What `drydock validate` checks beyond `load_spec`: a method to run (a spec without one
    still serves `drydock train --method` and `drydock eval`, which load it too) and the
    teacher's own limits. Raises a SpecError listing every problem."""
    problems = ([] if spec.methods else [f"{NO_METHODS} (`drydock methods` lists them), e.g. `methods: {{kd: {{}}}}`"])
    problems += teacher_problems(spec)
    if problems:
        raise SpecError(problems)


# ----------------------------------------------------------------------------------------------
# DeepSpeed presets
# ----------------------------------------------------------------------------------------------


def load_deepspeed_preset(spec: SweepSpec) -> dict[str, Any] | None:
    """The DeepSpeed JSON config the spec names, read and checked; None when it names none.

    `drydock validate` calls it, so it reports a missing or mismatched preset, and so does the
    sweep before any work, which hands the content to the Train workers (they may run in another
    working directory, or on other nodes). `load_spec` reads no file the spec names: a spec is
    loaded by commands that never use the preset (`drydock eval`, `drydock train`). A relative path is relative to the working
    directory. The preset's ZeRO stage must equal `resources.deepspeed.zero_stage`: the loop sets
    the stage from the spec, so a preset saying otherwise would silently run another stage.
    """
    ds = spec.resources.deepspeed
    if spec.resources.strategy != "deepspeed" or not ds.preset:
        return None
    field = "resources.deepspeed.preset"
    path = Path(ds.preset)
    if not path.is_file():
        raise SpecError(f"{field}: {path} is not a file (a DeepSpeed JSON config)")
    try:
        preset = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{field}: {path} cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"{field}: {path} is not valid JSON ({e})") from None
    if not isinstance(preset, dict):
        raise SpecError(f"{field}: {path} holds a JSON {type(preset).__name__}, not an object (a DeepSpeed config)")
    zero = preset.get("zero_optimization") or {}
    stage = zero.get("stage") if isinstance(zero, dict) else None
    if stage is not None and stage != ds.zero_stage:
        raise SpecError(f"{field}: {path} sets ZeRO stage {stage}, but resources.deepspeed.zero_stage is {ds.zero_stage}")
    if isinstance(zero, dict) and zero.get("overlap_comm") and ds.zero_stage < 2:
        # drydock steps DeepSpeed with unmanaged accumulation (pipeline/training/engine.py), which
        # DeepSpeed 0.19 allows with overlap_comm only at stage 2 (an assertion in every trial)
        raise SpecError(f"{field}: {path} sets overlap_comm, which drydock's accumulation supports only with "
                        f"ZeRO stage 2 (resources.deepspeed.zero_stage is {ds.zero_stage})")
    return preset
