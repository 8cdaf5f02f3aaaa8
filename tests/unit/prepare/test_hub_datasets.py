"""Hub datasets as users have them (docs/hub-datasets.md), read from local folders in the hub's own
layout (`data/<split>-00000-of-00001.parquet`, what `datasets.load_dataset(<folder>)` reads), so
no network: train and test only, like imdb or ag_news; a `ClassLabel` label column naming the
classes; `task.splits` mapping or carving the dev split; the names reaching the model and a
Train worker that reads only the prepared cache."""

from __future__ import annotations

import time
from pathlib import Path

import datasets
import pytest
import yaml
from pydantic import ValidationError

from pipeline.cli.main import main
from pipeline.config import TaskConfig, spec_from_dict, spec_to_dict
from pipeline.errors import DataError, SpecError
from pipeline.prepare.fingerprint import data_fingerprint
from pipeline.prepare.hub_datasets import pinned_task
from pipeline.prepare.models import random_teacher
from pipeline.prepare.revisions import pin_revisions, source_revisions
from pipeline.prepare.sources import load_raw, load_test_split
from pipeline.prepare.stage import task_info
from pipeline.prepare.tasks import task_spec
from pipeline.prepare.tokenized import SOURCE_FILE, data_folder_name, load_prepared_data, prepare_data

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke.yaml"
NAMES = ["negative", "positive"]
TRAIN_TEXTS = [f"train review number {i}" for i in range(20)]
TEST_TEXTS = [f"test review number {i}" for i in range(6)]


def write_split(folder: Path, split: str, texts: list[str], label: datasets.ClassLabel | datasets.Value) -> None:
    rows = datasets.Dataset.from_dict(
        {"text": texts, "label": [i % 2 for i in range(len(texts))]},
        features=datasets.Features({"text": datasets.Value("string"), "label": label}),
    )
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows.to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))


@pytest.fixture(scope="module")
def hub_folders(tmp_path_factory):
    """Two datasets with train and test only (one naming its classes, one with plain integers),
    and a datasets cache of this module's own (a local folder's Arrow copy is built there)."""
    root = tmp_path_factory.mktemp("hub")
    named, plain = root / "reviews", root / "plain"
    for split, texts in (("train", TRAIN_TEXTS), ("test", TEST_TEXTS)):
        write_split(named, split, texts, datasets.ClassLabel(names=NAMES))
        write_split(plain, split, texts, datasets.Value("int64"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", root / "datasets-cache")
        yield {"named": named, "plain": plain}


def reviews(folder: Path, **kw) -> TaskConfig:
    return TaskConfig(name="reviews", source="hub", hub_path=str(folder), text_columns=["text"], **kw)


CARVED = {"dev": {"from": "train", "fraction": 0.25}}


# ----------------------------------------------------------------------------------------------
# task.splits
# ----------------------------------------------------------------------------------------------


def test_without_a_validation_split_the_error_names_task_splits_and_the_splits_found(hub_folders):
    with pytest.raises(DataError) as err:
        load_raw(reviews(hub_folders["named"]))
    message = str(err.value)
    assert "has no split for the task's dev (its splits: train, test)" in message
    assert "task.splits" in message
    assert "`{dev: test}`" in message and "`{dev: {from: train, fraction: 0.1}}`" in message


def test_splits_map_dev_onto_the_test_split(hub_folders):
    raw = load_raw(reviews(hub_folders["named"], splits={"dev": "test"}))
    assert {split: len(rows) for split, rows in raw.items()} == {"train": 20, "dev": 6}
    assert raw["dev"]["text_a"][:] == TEST_TEXTS
    assert raw["dev"]["label"][:] == [0, 1, 0, 1, 0, 1]


def test_a_carved_dev_split_is_seeded_disjoint_and_leaves_train(hub_folders):
    cfg = reviews(hub_folders["named"], splits=CARVED)
    first, second = load_raw(cfg), load_raw(cfg)
    assert (len(first["train"]), len(first["dev"])) == (15, 5)
    train, dev = first["train"]["text_a"][:], first["dev"]["text_a"][:]
    assert not set(train) & set(dev)
    assert sorted(train + dev) == sorted(TRAIN_TEXTS)
    assert train == [t for t in TRAIN_TEXTS if t in set(train)]  # the split's own order is kept
    assert (second["train"]["text_a"][:], second["dev"]["text_a"][:]) == (train, dev)
    # labels travel with their rows (row i has label i % 2)
    assert first["dev"]["label"][:] == [int(t.rsplit(" ", 1)[1]) % 2 for t in dev]
    other = load_raw(cfg.model_copy(update={"sample_seed": 1}))
    assert other["dev"]["text_a"][:] != dev


def test_a_mapped_split_the_dataset_lacks_is_named_with_the_splits_found(hub_folders):
    with pytest.raises(DataError, match=r"task\.splits\.dev: dataset .*reviews has no split 'validation' \(its splits: train, test\)"):
        load_raw(reviews(hub_folders["named"], splits={"dev": "validation"}))
    with pytest.raises(DataError, match=r"task\.splits\.dev\.from: dataset .*reviews has no split 'training'"):
        load_raw(reviews(hub_folders["named"], splits={"dev": {"from": "training", "fraction": 0.1}}))


def test_the_mapping_is_part_of_the_fingerprint(hub_folders, tiny_tokenizer):
    folder = hub_folders["named"]
    to_test = data_fingerprint(pinned_task(reviews(folder, splits={"dev": "test"})), tiny_tokenizer)
    carved = data_fingerprint(pinned_task(reviews(folder, splits=CARVED)), tiny_tokenizer)
    assert to_test != carved


@pytest.mark.parametrize(
    ("splits", "expected"),
    [
        ({"dev": "train"}, "task.splits: dev reads split 'train', which train reads too"),
        ({"dev": {"from": "train", "fraction": 1.0}}, "task.splits.dev.fraction: Input should be less than 1"),
        ({"dev": {"from": "train"}}, "task.splits.dev.fraction: required field is missing"),
        ({"dev": 3}, "task.splits.dev: expected a split name, or a carving `{from: <split>, fraction: <between 0 and 1>}`"),
        ({"validation": "test"}, "task.splits.validation: unknown key"),
        ({"dev_mismatched": "test"}, "task: task.splits.dev_mismatched only applies to mnli"),
    ],
)
def test_bad_split_mappings_fail_validation_with_one_line_each(splits, expected):
    raw = yaml.safe_load(SMOKE.read_text())
    raw["task"] = {"name": "reviews", "source": "hub", "hub_path": "org/reviews", "text_columns": ["text"], "splits": splits}
    with pytest.raises(SpecError) as err:
        spec_from_dict(raw)
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(expected), err.value.problems


def test_splits_apply_only_to_the_hub(tmp_path):
    with pytest.raises(ValidationError, match="task.splits only applies to source 'hub'"):
        TaskConfig(name="reviews", source="files", files={"train": "a.csv", "dev": "b.csv"}, text_columns=["text"],
                   label_names=NAMES, splits={"dev": "test"})


def test_a_mapped_test_split_is_what_eval_scores(hub_folders):
    rows = load_test_split(reviews(hub_folders["named"], splits={"dev": {"from": "train", "fraction": 0.2}, "test": "test"}))
    assert rows["text_a"][:] == TEST_TEXTS


# ----------------------------------------------------------------------------------------------
# label names from the dataset's ClassLabel
# ----------------------------------------------------------------------------------------------


def test_files_still_need_label_names_but_a_hub_dataset_may_name_them():
    with pytest.raises(ValidationError, match="needs task.label_names or task.num_labels"):
        TaskConfig(name="reviews", source="files", files={"train": "a.csv", "dev": "b.csv"}, text_columns=["text"])
    assert TaskConfig(name="reviews", source="hub", hub_path="org/reviews", text_columns=["text"]).label_names is None


def test_pinning_reads_the_class_label_names(hub_folders):
    cfg = reviews(hub_folders["named"], splits={"dev": "test"})
    pinned = pinned_task(cfg)
    assert pinned.label_names == NAMES
    assert pinned.hub_revision is None  # a local folder has no commits
    assert task_spec(pinned).label_names == tuple(NAMES) and task_spec(pinned).num_labels == 2
    with pytest.raises(DataError, match="pinned_task"):  # an unpinned config cannot pretend to know them
        task_spec(cfg)


def test_names_that_differ_from_the_class_label_are_refused_naming_both(hub_folders):
    with pytest.raises(DataError) as err:
        load_raw(reviews(hub_folders["named"], splits={"dev": "test"}, label_names=["positive", "negative"]))
    assert "task.label_names ['positive', 'negative'] differ" in str(err.value)
    assert "a ClassLabel ['negative', 'positive']" in str(err.value)
    with pytest.raises(DataError, match=r"task.num_labels \(3\) disagrees with column 'label' .* a ClassLabel of 2"):
        pinned_task(reviews(hub_folders["named"], splits={"dev": "test"}, num_labels=3))


def test_integer_labels_without_a_class_label_still_need_names_or_a_count(hub_folders):
    with pytest.raises(DataError, match=r"task.label_names: column 'label' of dataset .*plain holds int64 values, not a ClassLabel"):
        load_raw(reviews(hub_folders["plain"], splits={"dev": "test"}))
    counted = pinned_task(reviews(hub_folders["plain"], splits={"dev": "test"}, num_labels=2))
    assert counted.label_names is None and task_spec(counted).label_names == ("0", "1")


def test_the_names_reach_the_model_the_cache_and_a_worker(hub_folders, tiny_tokenizer, tmp_path):
    cfg = reviews(hub_folders["named"], splits=CARVED, max_seq_length=16)
    prepared = prepare_data(cfg, tiny_tokenizer, tmp_path)
    assert prepared.task.label_names == tuple(NAMES)
    assert (prepared.num_train, len(prepared.dev["dev"])) == (15, 5)
    assert prepared.revision is None
    teacher = random_teacher(load_spec_teacher(), task_info(prepared), len(tiny_tokenizer))
    assert teacher.config.id2label == {0: "negative", 1: "positive"}
    # a Train worker gets the folder and a config; one that was never pinned still gets the names
    folder = tmp_path / data_folder_name(prepared.fingerprint)
    assert (folder / SOURCE_FILE).is_file()
    on_worker = load_prepared_data(cfg, folder)
    assert on_worker.task.label_names == tuple(NAMES) and on_worker.num_train == 15


def load_spec_teacher():
    return spec_from_dict(yaml.safe_load(SMOKE.read_text())).teacher


def test_the_pinned_spec_carries_names_and_mapping_to_every_process(hub_folders):
    raw = yaml.safe_load(SMOKE.read_text())
    raw["task"] = {"name": "reviews", "source": "hub", "hub_path": str(hub_folders["named"]), "text_columns": ["text"],
                   "splits": CARVED}
    spec = spec_from_dict(raw)
    pinned = pin_revisions(spec)
    assert pinned.task.label_names == NAMES and spec.task.label_names is None
    shipped = spec_to_dict(pinned)  # what Ray hands the Train workers
    assert shipped["task"]["splits"]["dev"] == {"from": "train", "fraction": 0.25}
    assert spec_from_dict(shipped).task == pinned.task
    assert source_revisions(pinned) == {}  # a local folder and a random teacher: no commits to record


def test_a_revision_for_a_local_folder_is_refused(hub_folders):
    with pytest.raises(DataError, match="task.hub_revision: task.hub_path .* is a local folder, which has no revisions"):
        pinned_task(reviews(hub_folders["named"], splits={"dev": "test"}, hub_revision="main"))


def test_validate_accepts_a_hub_task_without_label_names(tmp_path, capsys):
    raw = yaml.safe_load(SMOKE.read_text())
    raw["task"] = {"name": "reviews", "source": "hub", "hub_path": "org/reviews", "text_columns": ["text"],
                   "splits": {"dev": "test"}}
    path = tmp_path / "reviews.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(path)]) == 0
    assert "valid (sweep 'smoke', task reviews" in capsys.readouterr().out


def test_hub_without_network_is_a_clear_error():
    started = time.monotonic()
    cfg = TaskConfig(name="rte", source="hub", hub_path="drydock-tests/no-such-dataset")
    with pytest.raises(DataError) as err:
        load_raw(cfg)
    assert "drydock-tests/no-such-dataset (config rte)" in str(err.value)
    assert "task.source: glue_dir" in str(err.value)
    assert time.monotonic() - started < 20  # offline mode fails fast instead of retrying

