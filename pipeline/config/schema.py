"""The spec's schema: one frozen pydantic model per section of a sweep spec, the markers of what
each field counts for in a run's records, and the limits a spec must keep.

The field names are the public contract (docs/spec.md): users' specs and scripts depend on
them, so fields may be added but never renamed without a migration message. Every model is
frozen and rejects unknown keys, so a typo in a spec fails in `drydock validate` instead of being
silently ignored three hours into a sweep. The `methods:` section is typed by each method's own
parameter model (`pipeline.config.params`); reading a spec file is `pipeline.config.loader`'s.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipeline.config.messages import field_problem
from pipeline.config.params import ParamSpace, method_spaces
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
# a spec file's size: hand-written specs are a few KB, and PyYAML's pure-Python parser took 14-62 s
# for 10 MB (issue 37); 256 KiB parses in well under a second
MAX_SPEC_BYTES = 256 * 1024
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

    def hub_dataset(self) -> tuple[str, str | None] | None:
        """(hub id, config) the hub knows this task's data by, for a model card the hub links to
        its dataset: GLUE's tasks are `nyu-mll/glue` with the task as config, whether read from
        the hub or from a GLUE folder; another hub dataset its own id (not a local folder's path).
        None for files and synthetic data."""
        source = self.resolved_source()
        if self.name in GLUE_TASKS and (source == "glue_dir" or (source == "hub" and self.hub_path == "nyu-mll/glue")):
            return "nyu-mll/glue", self.hub_config or self.name
        if source == "hub" and not Path(self.hub_path).expanduser().exists():
            return self.hub_path, self.hub_config
        return None

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
    # Micro-batches of rows of similar length (Hugging Face's `group_by_length`; the teacher's
    # fine-tuning too): each pads to about its own rows' length instead of the longest of random
    # rows: 1.05x the rows' tokens against 3.00x on the quickstart's SST-2 sentences
    # (benchmarks/RESULTS.md, "Grouping by length"; pipeline.training.batches.EpochSampler).
    # Off by default: the batches are then the papers' random ones.
    group_by_length: Annotated[bool, ADDED_LATER] = False
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


# `search.algorithm`: `grid` runs the fixed list of `pipeline.search.space`; the others ask an
# Optuna study for one configuration at a time (`pipeline.search.searcher`), `random` being the
# baseline the model-based ones are measured against (`benchmarks/search_efficiency.py`).
Algorithm = Literal["grid", "random", "tpe", "motpe", "nsga2"]
Objective = Literal["metric", "latency"]
SINGLE_OBJECTIVE: frozenset[str] = frozenset({"tpe"})
MULTI_OBJECTIVE: frozenset[str] = frozenset({"motpe", "nsga2"})
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(value: Any) -> Any:
    """`search.time_budget` as written: seconds, or text such as "45m", "2h", "1.5d"."""
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match is None:
            raise ValueError(f"expected seconds or a duration such as 90s, 45m, 2h, got {value!r}")
        return float(match.group(1)) * _SECONDS[match.group(2) or "s"]
    return value


class SearchConfig(_Model):
    scheduler: Literal["fifo", "asha"] = "fifo"
    num_samples: Annotated[int, Field(gt=0, le=MAX_TRIALS)] = 1
    max_concurrent_trials: PositiveInt | None = None
    asha: AshaConfig = AshaConfig()
    max_failures: NonNegInt = 1
    sample_seed: Seed = 0
    algorithm: Annotated[Algorithm, ADDED_LATER] = "grid"
    # configurations in all (every method together), each run once per seed; a model-based
    # algorithm needs it, a grid may cap itself with it only at its own size
    num_configurations: Annotated[Annotated[int, Field(gt=0, le=MAX_TRIALS)] | None, ADDED_LATER] = None
    # no new configuration is asked for after this many seconds of search (the running ones finish)
    time_budget: Annotated[Annotated[PositiveFloat | None, BeforeValidator(_seconds)], HOW_IT_RUNS] = None
    # what a searching algorithm aims at: the task metric's seed mean (maximised) and the
    # student's latency at the front shape and runtime (minimised); default: by algorithm
    objectives: Annotated[Annotated[list[Objective], Field(min_length=1)] | None, ADDED_LATER] = None
    # a previous sweep's folder (<workdir>/<name>) whose studies' finished configurations seed this
    # study (`pipeline.search.warm_start`): a scheduled retrain does not start from nothing
    warm_start: Annotated[str | None, ADDED_LATER] = None

    @model_validator(mode="after")
    def _algorithm_fits(self) -> Self:
        """What one algorithm can serve: the problems `drydock validate` names, one line each."""
        algorithm, objectives = self.algorithm, self.objectives
        if algorithm == "grid":
            if objectives is not None:
                raise field_problem("objectives", "the grid runs every configuration and aims at nothing; "
                                 "set search.algorithm to random, tpe, motpe or nsga2 to search for them")
            if self.warm_start is not None:
                raise field_problem("warm_start", "seeds a searching algorithm's study; the grid runs its fixed list")
            if self.time_budget is not None:
                raise field_problem("time_budget", "the grid runs every configuration of its fixed list; a time budget "
                                    "needs a searching algorithm (random, tpe, motpe or nsga2)")
            return self
        if self.num_configurations is None:
            raise field_problem("num_configurations", f"algorithm {algorithm} asks for one configuration at a time "
                             "and needs a budget: how many configurations in all (each runs once per seed)")
        if self.num_samples != 1:
            raise field_problem("num_samples", f"counts draws per grid point of algorithm grid; algorithm {algorithm} "
                             "is budgeted by search.num_configurations")
        if objectives is not None and len(set(objectives)) != len(objectives):
            raise field_problem("objectives", "must not repeat")
        if algorithm in SINGLE_OBJECTIVE and objectives is not None and objectives != ["metric"]:
            raise field_problem("objectives", f"{algorithm} optimises one objective, the task metric; "
                             "use motpe or nsga2 for metric and latency together")
        if algorithm in MULTI_OBJECTIVE and objectives is not None and sorted(objectives) != ["latency", "metric"]:
            raise field_problem("objectives", f"{algorithm} searches the metric and latency together; "
                             "use tpe for the metric alone")
        return self

    @property
    def searching(self) -> bool:
        """An Optuna study asks for the configurations (not the fixed grid)."""
        return self.algorithm != "grid"

    @property
    def aims_at(self) -> tuple[Objective, ...]:
        """The objectives the study is told, in its order: the metric first."""
        if self.objectives is not None:
            return tuple(o for o in ("metric", "latency") if o in self.objectives)
        return ("metric",) if self.algorithm in SINGLE_OBJECTIVE else ("metric", "latency")


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
    # Where a trial of one worker trains. `ray-train`: a Ray Train job, which starts a controller,
    # a placement-group cleaner, a synchronisation actor and the worker beside the trial's own
    # process, each importing torch, per trial (~10 s of CPU per trial beside the worker's own
    # imports, benchmarks/RESULTS.md "Where a trial's CPU goes"). `tune-actor`: in the Tune
    # trial's own process, which then holds the worker's CPUs (and GPUs), retried by Tune from its
    # last checkpoint (`search.max_failures`), and, under the FIFO scheduler, reused by the next
    # trial with its imports done. Only for one worker under ddp: nothing to synchronise.
    trial_runner: Literal["ray-train", "tune-actor"] = "ray-train"

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

    @model_validator(mode="after")
    def _one_worker_in_a_tune_actor(self) -> ResourcesConfig:
        """A Tune actor is one process: it holds one worker's resources and has no process group."""
        if self.trial_runner == "tune-actor" and (self.workers_per_trial != 1 or self.strategy != "ddp"):
            raise field_problem("trial_runner", f"tune-actor runs a trial in one process, without Ray Train: it "
                                f"needs workers_per_trial: 1 and strategy: ddp (got {self.workers_per_trial} and "
                                f"{self.strategy}); use trial_runner: ray-train")
        return self

    @model_validator(mode="after")
    def _one_gpu_per_zero3_rank(self) -> ResourcesConfig:
        """ZeRO-3 partitions the module through `deepspeed.zero.Init`, which puts the parameters
        on `cuda:LOCAL_RANK` whatever device the engine was given: a worker owning GPUs {2, 3}
        as local rank 1 would partition onto GPU 1, another worker's (issue #35, item 1; the
        engine itself is told Ray's device, `pipeline.training.engine.deepspeed_device_args`).
        With one GPU per worker the two agree. More than one GPU per worker trains on the first
        only, under any strategy: for more GPUs per trial, add workers."""
        if (self.use_gpu and self.strategy == "deepspeed" and self.deepspeed.zero_stage == 3
                and self.gpus_per_worker != 1):
            raise field_problem("gpus_per_worker", f"{self.gpus_per_worker:g} GPUs per worker under ZeRO-3 would partition "
                                "a worker's parameters onto another worker's GPU; use 1 GPU per worker and more "
                                "workers_per_trial")
        return self

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
    # placed on the front (`pipeline.measure.table`, `pipeline.select.variants`); default: DEFAULT_RUNTIMES of the device
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
    # each field that held a `${VAR}`: path → (as written, its value), set by the loader; what a run
    # writes down is the spec as written (`pipeline.config.spec_as_written`), never a secret's value
    _written: dict[str, tuple[str, Any]] = PrivateAttr(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        """Equal fields, equal specs: how a field was written (`_written`) is not part of what it says."""
        if not isinstance(other, SweepSpec):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = _Model.__hash__

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

