"""The `hub` source: a Hugging Face dataset at a pinned commit, or a local folder in a hub layout.

`datasets.load_dataset(hub_path, hub_config or <GLUE config name>, revision=<commit>)`, at the
commit `hub_revision` (default `main`) resolves to (`pipeline.prepare.hub`): the fingerprint holds
that commit, so a push to the dataset is a change, and the data is loaded at it. A local folder in
a hub layout has no commits: its files' bytes are fingerprinted instead. `task.splits` maps the
task's splits onto the dataset's (or carves dev out of train); a custom task without
`label_names` takes them from the dataset's ClassLabel column (docs/hub-datasets.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from pipeline.config import CarvedSplit, TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.hub import COMMIT, resolve_revision
from pipeline.prepare.rows import Table, split_from_table
from pipeline.prepare.tasks import GLUE, TaskSpec, task_spec

# Task split -> the hub split names it reads when `task.splits` does not say, the first present.
# GLUE's test splits have no labels and are never read unless `task.splits.test` names one.
_HUB_SPLITS = {
    "train": ("train",),
    "dev": ("validation_matched", "validation"),
    "dev_mismatched": ("validation_mismatched",),
}
_CARVE_STREAM = 0x63617276  # the carving's own random stream under task.sample_seed ("carv")


def local_hub_folder(cfg: TaskConfig) -> Path | None:
    """`task.hub_path` naming a folder here (what `datasets.load_dataset` itself loads from before
    asking the hub): a copy in a hub layout, with files but no commits."""
    folder = Path(cfg.hub_path).expanduser()
    return folder if folder.is_dir() else None


def dataset_revision(cfg: TaskConfig) -> str | None:
    """The commit of the hub dataset `task.hub_revision` (default `main`) names now; None when the
    task does not read the hub, or reads a local folder (whose files' bytes are fingerprinted)."""
    if cfg.resolved_source() != "hub":
        return None
    folder = local_hub_folder(cfg)
    if folder is not None:
        if cfg.hub_revision is not None:
            raise DataError(f"task.hub_revision: task.hub_path {cfg.hub_path} is a local folder, which has no revisions "
                            "(its files' bytes are what is fingerprinted); remove task.hub_revision")
        return None
    try:
        return resolve_revision(cfg.hub_path, cfg.hub_revision, repo_type="dataset", field="task.hub_revision", error=DataError)
    except DataError as e:
        raise DataError(f"could not load dataset {_hub_described(cfg)} from the Hugging Face hub ({e}); {_OFFLINE_HINT}") from None


def pinned_task(cfg: TaskConfig) -> TaskConfig:
    """`cfg` with what its hub dataset says now written in (other sources unchanged): the revision
    replaced by the commit it names, and a custom classification task's missing `label_names` read
    from the dataset's ClassLabel column at that commit. Resolved once, when the sweep starts
    (`pipeline.prepare.revisions.pin_revisions`), and handed on in the spec: the fingerprint, the
    rows loaded, the teacher's and students' `id2label`, the metrics and the Train workers (which
    read the prepared cache, never the dataset) cannot see two commits or two sets of names."""
    revision = dataset_revision(cfg)
    update: dict[str, Any] = {}
    if revision is not None and revision != cfg.hub_revision:
        update["hub_revision"] = revision
    if reads_hub_label_names(cfg):
        names = _hub_label_names(cfg, revision)
        if names is not None:
            update["label_names"] = list(names)
    return cfg.model_copy(update=update) if update else cfg


def reads_hub_label_names(cfg: TaskConfig) -> bool:
    """A custom hub classification task that gives no label names: the dataset's ClassLabel may."""
    return cfg.resolved_source() == "hub" and cfg.name not in GLUE and not cfg.regression and cfg.label_names is None


def resolved_task(cfg: TaskConfig) -> tuple[TaskConfig, TaskSpec]:
    """The pinned config and its spec. A config wrong on its face fails before the hub is asked;
    one whose label names the dataset gives can only be checked once they are read."""
    if not reads_hub_label_names(cfg):
        task_spec(cfg)
    cfg = pinned_task(cfg)
    return cfg, task_spec(cfg)


def _hub_label_names(cfg: TaskConfig, revision: str | None) -> tuple[str, ...] | None:
    """The names of the label column's ClassLabel, from the split train reads; None when the
    column holds plain integers and `task.num_labels` says how many (they are then their names)."""
    described = _hub_described(cfg)
    hub = _hub_dataset(cfg, revision)
    name = _hub_sources(cfg, ("train",), hub, described)["train"]
    assert isinstance(name, str)  # only dev may be carved
    features = hub[name].features
    if cfg.label_column not in features:
        found = ", ".join(repr(c) for c in features) or "none"
        raise DataError(f"{described} split {name}: missing column {cfg.label_column!r} (task.label_column; columns found: {found})")
    feature = features[cfg.label_column]
    if not isinstance(feature, datasets.ClassLabel):
        if cfg.num_labels is not None:
            return None
        raise DataError(f"task.label_names: column {cfg.label_column!r} of dataset {described} holds {_feature_type(feature)}, "
                        "not a ClassLabel naming its classes; set task.label_names (or task.num_labels when the labels "
                        "are integers 0..n-1)")
    names = tuple(feature.names)
    if cfg.num_labels is not None and cfg.num_labels != len(names):
        raise DataError(f"task.num_labels ({cfg.num_labels}) disagrees with column {cfg.label_column!r} of dataset {described}, "
                        f"a ClassLabel of {len(names)}: {', '.join(names)}")
    return names


def _feature_type(feature: Any) -> str:
    return f"{feature.dtype} values" if isinstance(feature, datasets.Value) else f"a {type(feature).__name__} feature"


_OFFLINE_HINT = "offline, download the GLUE release and use `task.source: glue_dir` with `task.glue_dir`, or `task.source: files`"


def _hub_config_name(cfg: TaskConfig) -> str | None:
    """A custom dataset is loaded without a config name unless `task.hub_config` names one."""
    return cfg.hub_config or (cfg.name if cfg.name in GLUE else None)


def _hub_described(cfg: TaskConfig) -> str:
    config_name = _hub_config_name(cfg)
    return f"{cfg.hub_path}" + (f" (config {config_name})" if config_name else "")


def _hub_dataset(cfg: TaskConfig, revision: str | None) -> datasets.DatasetDict:
    """Every split of the dataset at `revision` (the resolved commit; None for a local folder)."""
    described = _hub_described(cfg)
    folder = local_hub_folder(cfg)
    try:
        hub = datasets.load_dataset(str(folder or cfg.hub_path), _hub_config_name(cfg), revision=revision)
    except Exception as e:  # network, auth, unknown name: all mean "use local data instead"
        if folder is not None:
            raise DataError(f"task.hub_path: could not load the dataset in folder {folder} ({e.__class__.__name__}: {e}); "
                            "it should hold a hub dataset's files (data/train-*.parquet, ...)") from e
        raise DataError(
            f"could not load dataset {described} from the Hugging Face hub ({e.__class__.__name__}: {e}); {_OFFLINE_HINT}"
        ) from e
    if not isinstance(hub, datasets.DatasetDict):
        raise DataError(f"task.hub_path: {described} loaded as a {type(hub).__name__}, not a dataset with named splits")
    check_loaded_revision(hub, revision, described)
    return hub


def _hub_sources(cfg: TaskConfig, splits: Sequence[str], hub: datasets.DatasetDict, described: str) -> dict[str, str | CarvedSplit]:
    """The dataset split each task split reads (or the carving that makes it): `task.splits`,
    else the hub's usual names. A dataset without one says what it has and how to map it."""
    available = list(hub)
    shown = ", ".join(available) or "none"
    sources: dict[str, str | CarvedSplit] = {}
    missing = []
    for split in splits:
        given = getattr(cfg.splits, split, None) if cfg.splits is not None else None
        if given is None:
            default = next((name for name in _HUB_SPLITS[split] if name in hub), None)
            if default is None:
                missing.append(split)
            else:
                sources[split] = default
            continue
        name = given.from_ if isinstance(given, CarvedSplit) else given
        if name not in hub:
            field = f"task.splits.{split}" + (".from" if isinstance(given, CarvedSplit) else "")
            raise DataError(f"{field}: dataset {described} has no split {name!r} (its splits: {shown})")
        sources[split] = given
    if missing:
        train = sources.get("train", "train")
        others = [name for name in available if name != train]
        examples = [f"`{{{missing[0]}: {others[0]}}}`"] if others else []
        if "dev" in missing and isinstance(train, str) and train in hub:
            examples.append(f"a seeded share of {train}: `{{dev: {{from: {train}, fraction: 0.1}}}}`")
        raise DataError(f"dataset {described} has no split for the task's {', '.join(missing)} (its splits: {shown}); "
                        f"say which split each reads with task.splits" + (f", e.g. {' or '.join(examples)}" if examples else ""))
    return sources


def _carve(num_rows: int, fraction: float, seed: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(kept, carved) row indices of a split of `num_rows`, each in the split's order: `fraction`
    of the rows (at least one, never all) drawn on a stream of `seed` of their own, so the same seed
    carves the same rows whatever `max_train_samples` later picks from the rest."""
    if num_rows < 2:
        raise DataError(f"task.splits.dev: {where} has {num_rows} row(s); carving a dev split out of it needs at least 2")
    size = min(num_rows - 1, max(1, round(num_rows * fraction)))
    order = np.random.default_rng([seed, _CARVE_STREAM]).permutation(num_rows)
    return np.sort(order[size:]), np.sort(order[:size])


def load_hub(cfg: TaskConfig, spec: TaskSpec) -> dict[str, datasets.Dataset]:
    described = _hub_described(cfg)
    hub = _hub_dataset(cfg, dataset_revision(cfg))
    sources = _hub_sources(cfg, ("train", *spec.dev_splits), hub, described)
    picked: dict[str, tuple[str, np.ndarray | None]] = {}
    for split, source in sources.items():
        if isinstance(source, CarvedSplit):
            kept, carved = _carve(len(hub[source.from_]), source.fraction, cfg.sample_seed, f"{described} split {source.from_}")
            picked[split] = (source.from_, carved)
            if sources["train"] == source.from_:  # the dev rows leave train
                picked["train"] = (source.from_, kept)
        else:
            picked.setdefault(split, (source, None))
    found = {}
    for split in ("train", *spec.dev_splits):
        name, indices = picked[split]
        rows = hub[name] if indices is None else hub[name].select(indices)
        _check_class_label(rows, cfg, spec, described)
        table = _hub_table(rows, f"{described} split {name}", indices)
        found[split] = split_from_table(table, spec.text_columns, cfg.label_column, spec, split, published=True)
    return found


def _check_class_label(rows: datasets.Dataset, cfg: TaskConfig, spec: TaskSpec, described: str) -> None:
    """A ClassLabel's integers are indices into its names: the task's names must be the same, in
    the same order, or every label would silently mean another class. A ClassLabel built from a
    count alone (names "0".."n-1") names nothing: only its count must agree."""
    feature = rows.features.get(cfg.label_column)
    if spec.regression or not isinstance(feature, datasets.ClassLabel):
        return
    names = tuple(feature.names)
    whose = "task.label_names" if cfg.label_names is not None else f"task {spec.name}'s label names"
    if names == tuple(str(i) for i in range(len(names))):
        if len(names) != spec.num_labels:
            raise DataError(f"{whose} ({spec.num_labels}) disagree with column {cfg.label_column!r} of dataset {described}, "
                            f"a ClassLabel of {len(names)} classes")
        return
    if names != spec.label_names:
        raise DataError(f"{whose} {list(spec.label_names)} differ from the names of column {cfg.label_column!r} of dataset "
                        f"{described}, a ClassLabel {list(names)}: its labels are indices into those, so give the same names "
                        "in the same order, or leave task.label_names out to take the dataset's")


def check_loaded_revision(hub: datasets.DatasetDict, revision: str | None, described: str) -> None:
    """Offline, `datasets` ignores the revision asked for and loads the newest copy in its own
    cache, whose folder is named by the commit it came from: a copy of another commit would be
    trained under this commit's fingerprint, so it is refused instead."""
    for split in hub.values():
        for cached in split.cache_files:
            commit = Path(cached["filename"]).parent.name
            if revision is not None and COMMIT.fullmatch(commit) and commit != revision:
                raise DataError(
                    f"task.hub_revision: {described} resolves to commit {revision}, but the datasets cache holds commit "
                    f"{commit} ({Path(cached['filename']).parent}), the one datasets loads offline; load it once "
                    f"with the hub reachable, or set task.hub_revision: {commit}"
                )


def _hub_table(dataset: datasets.Dataset, source: str, indices: np.ndarray | None = None) -> Table:
    """`indices`: the rows of a carved split, so an error names the row's index in the dataset's own split."""
    def locate(i: int) -> str:
        return f"row index {i if indices is None else int(indices[i])}"

    return Table(source, dataset.column_names, len(dataset), lambda name: dataset[name][:], locate)



def hub_test_split(cfg: TaskConfig) -> datasets.Dataset:
    cfg, spec = resolved_task(cfg)
    assert cfg.splits is not None and cfg.splits.test is not None
    described = _hub_described(cfg)
    hub = _hub_dataset(cfg, dataset_revision(cfg))
    name = _hub_sources(cfg, ("test",), hub, described)["test"]
    assert isinstance(name, str)  # only dev may be carved
    table = _hub_table(hub[name], f"{described} split {name}")
    if cfg.label_column not in table.columns:
        raise DataError(f"{table.source}: the test split has no labels (no column {cfg.label_column!r}, task.label_column); "
                        "it cannot be scored")
    _check_class_label(hub[name], cfg, spec, described)
    return split_from_table(table, spec.text_columns, cfg.label_column, spec, "test", published=True)
