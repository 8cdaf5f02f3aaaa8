"""Data layer: every GLUE layout, the files and synthetic sources, validation, sampling, the cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare import fingerprint, sources, synthetic, tokenized
from pipeline.prepare.sources import load_raw, subsample, train_texts
from pipeline.prepare.tasks import GLUE, task_spec
from pipeline.prepare.tokenized import prepare_data, prepare_unlabeled

# ----------------------------------------------------------------------------------------------
# GLUE layouts, written the way the official release writes them
# ----------------------------------------------------------------------------------------------


def tsv(*rows: str) -> str:
    return "".join(row + "\n" for row in rows)


MNLI_TRAIN_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
)
MNLI_DEV_HEADER = MNLI_TRAIN_HEADER.replace("label1\tgold_label", "label1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label")

# task -> ({file name: contents}, {split: (texts_a, texts_b or None, labels)})
GLUE_CASES = {
    "cola": (
        {
            "train.tsv": tsv("gj04\t1\t\tOur friends won't buy this analysis.", "gj04\t0\t*\tThey drank the pub."),
            "dev.tsv": tsv("bc01\t1\t\tThe sailors rode the breeze clear of the rocks."),
        },
        {
            "train": (["Our friends won't buy this analysis.", "They drank the pub."], None, [1, 0]),
            "dev": (["The sailors rode the breeze clear of the rocks."], None, [1]),
        },
    ),
    "sst2": (
        {
            # A lone quote at the start of a field: a quoting reader would swallow the next rows.
            "train.tsv": tsv("sentence\tlabel", '" lone quote opens this one \t0', 'it \'s a "charming" journey . \t1', "plain \t1"),
            "dev.tsv": tsv("sentence\tlabel", "unflinchingly bleak and desperate \t0"),
        },
        {
            "train": (['" lone quote opens this one ', 'it \'s a "charming" journey . ', "plain "], None, [0, 1, 1]),
            "dev": (["unflinchingly bleak and desperate "], None, [0]),
        },
    ),
    "mrpc": (
        {
            # Microsoft's files open with a byte-order mark.
            "train.tsv": "\ufeff"
            + tsv(
                "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
                '1\t702876\t702977\tAmrozi accused his brother .\tReferring to him as only " the witness " .',
                "0\t2108705\t2108831\tYucaipa owned Dominick 's .\tYucaipa bought Dominick 's in 1995 .",
            ),
            "dev.tsv": tsv("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t1\t2\tHe said yes .\tHe agreed ."),
        },
        {
            "train": (
                ["Amrozi accused his brother .", "Yucaipa owned Dominick 's ."],
                ['Referring to him as only " the witness " .', "Yucaipa bought Dominick 's in 1995 ."],
                [1, 0],
            ),
            "dev": (["He said yes ."], ["He agreed ."], [1]),
        },
    ),
    "stsb": (
        {
            "train.tsv": tsv(
                "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
                "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000",
                "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man plays a flute.\tA man plays a bamboo flute.\t3.800",
            ),
            "dev.tsv": tsv(
                "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
                "0\tmain-news\tnews\t2015\t0002\tnone\tnone\tA man is cutting.\tA dog barks.\t0.000",
            ),
        },
        {
            "train": (["A plane is taking off.", "A man plays a flute."], ["An air plane is taking off.", "A man plays a bamboo flute."], [5.0, 3.8]),
            "dev": (["A man is cutting."], ["A dog barks."], [0.0]),
        },
    ),
    "qqp": (
        {
            "train.tsv": tsv(
                "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                "133273\t213221\t213222\tHow is the life of a math student?\tWhich level of math is best?\t0",
                "402555\t536040\t536041\tHow do I control my horny emotions?\tHow do you control your horniness?\t1",
            ),
            "dev.tsv": tsv("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "1\t2\t3\tWhy?\tWhy not?\t0"),
        },
        {
            "train": (
                ["How is the life of a math student?", "How do I control my horny emotions?"],
                ["Which level of math is best?", "How do you control your horniness?"],
                [0, 1],
            ),
            "dev": (["Why?"], ["Why not?"], [0]),
        },
    ),
    "mnli": (
        {
            "train.tsv": tsv(
                MNLI_TRAIN_HEADER,
                "0\t31193\t31193n\tgovernment\t( ( p ) )\t( h )\t(ROOT p)\t(ROOT h)\tConceptually cream skimming.\tProduct and geography.\tneutral\tneutral",
                "1\t101457\t101457e\ttelephone\t( p )\t( h )\t(ROOT p)\t(ROOT h)\tyou know during the season\tYou lose the things.\tentailment\tentailment",
            ),
            "dev_matched.tsv": tsv(
                MNLI_DEV_HEADER,
                "0\t63735\t63735n\tslate\t( p )\t( h )\t(ROOT p)\t(ROOT h)\tThe new rights are nice.\tEveryone loves them.\tneutral\tneutral\tneutral\tentailment\tneutral\tneutral",
            ),
            "dev_mismatched.tsv": tsv(
                MNLI_DEV_HEADER,
                "0\t75290\t75290c\tletters\t( p )\t( h )\t(ROOT p)\t(ROOT h)\tYour contribution helped.\tIt made no difference.\tcontradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction",
            ),
        },
        {
            "train": (["Conceptually cream skimming.", "you know during the season"], ["Product and geography.", "You lose the things."], [1, 0]),
            "dev": (["The new rights are nice."], ["Everyone loves them."], [1]),
            "dev_mismatched": (["Your contribution helped."], ["It made no difference."], [2]),
        },
    ),
    "qnli": (
        {
            "train.tsv": tsv(
                "index\tquestion\tsentence\tlabel",
                "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it, it was darker.\tnot_entailment",
                "1\tWhich missile batteries often have individual launchers?\tThe missile batteries have launchers.\tentailment",
            ),
            "dev.tsv": tsv("index\tquestion\tsentence\tlabel", "0\tWhat is it?\tIt is a cat.\tentailment"),
        },
        {
            "train": (
                ["When did the third Digimon series begin?", "Which missile batteries often have individual launchers?"],
                ["Unlike the two seasons before it, it was darker.", "The missile batteries have launchers."],
                [1, 0],
            ),
            "dev": (["What is it?"], ["It is a cat."], [0]),
        },
    ),
    "rte": (
        {
            "train.tsv": tsv(
                "index\tsentence1\tsentence2\tlabel",
                "0\tNo Weapons of Mass Destruction Found in Iraq Yet.\tWeapons of Mass Destruction Found in Iraq.\tnot_entailment",
                "1\tA place of sorrow became a place of celebration.\tPope Benedict XVI is the new leader.\tentailment",
            ),
            "dev.tsv": tsv("index\tsentence1\tsentence2\tlabel", "0\tDana Reeve died.\tChristopher Reeve had an accident.\tnot_entailment"),
        },
        {
            "train": (
                ["No Weapons of Mass Destruction Found in Iraq Yet.", "A place of sorrow became a place of celebration."],
                ["Weapons of Mass Destruction Found in Iraq.", "Pope Benedict XVI is the new leader."],
                [1, 0],
            ),
            "dev": (["Dana Reeve died."], ["Christopher Reeve had an accident."], [1]),
        },
    ),
}
GLUE_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE"}


def write_glue_task(root: Path, task: str, files: dict[str, str] | None = None) -> Path:
    folder = root / GLUE_FOLDERS[task]
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (files or GLUE_CASES[task][0]).items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def glue_cfg(task: str, glue_dir: Path, **kw) -> TaskConfig:
    return TaskConfig(name=task, source="glue_dir", glue_dir=str(glue_dir), **kw)


@pytest.mark.parametrize("task", sorted(GLUE_CASES))
def test_every_glue_layout_parses_exactly(task, tmp_path):
    write_glue_task(tmp_path, task)
    raw = load_raw(glue_cfg(task, tmp_path))
    expected = GLUE_CASES[task][1]
    assert list(raw) == list(expected)
    for split, (texts_a, texts_b, labels) in expected.items():
        rows = raw[split]
        assert rows["text_a"][:] == texts_a
        if texts_b is None:
            assert rows.column_names == ["text_a", "label"]
        else:
            assert rows["text_b"][:] == texts_b
        assert rows["label"][:] == pytest.approx(labels)
        assert rows.features["label"].dtype == ("float32" if task == "stsb" else "int64")


def test_glue_dir_may_point_at_the_task_folder(tmp_path):
    folder = write_glue_task(tmp_path, "rte")
    assert load_raw(glue_cfg("rte", folder))["train"]["label"][:] == [1, 0]


def test_registry_follows_the_hub():
    assert set(GLUE) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"}
    assert GLUE["mnli"].label_names == ("entailment", "neutral", "contradiction")
    assert GLUE["mnli"].dev_splits == ("dev", "dev_mismatched")
    assert GLUE["rte"].label_names == ("entailment", "not_entailment")
    assert (GLUE["stsb"].num_labels, GLUE["stsb"].regression, GLUE["stsb"].primary_metric) == (1, True, "pearson")
    assert (GLUE["mrpc"].metrics, GLUE["mrpc"].primary_metric) == (("f1", "accuracy"), "f1")
    assert GLUE["cola"].primary_metric == "mcc"
    assert all(spec.is_pair == (len(spec.text_columns) == 2) for spec in GLUE.values())


# ----------------------------------------------------------------------------------------------
# files source
# ----------------------------------------------------------------------------------------------

ROWS = [
    {"question": "is it good, really?", "answer": "yes, \"very\"", "verdict": "yes"},
    {"question": "is it bad?", "answer": "no", "verdict": "no"},
    {"question": "maybe?", "answer": "who knows", "verdict": "1"},
]


def write_rows(path: Path, rows: list[dict], fmt: str) -> Path:
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        sep = "," if fmt == "csv" else "\t"
        quote = (lambda v: '"' + v.replace('"', '""') + '"') if fmt == "csv" else (lambda v: v)
        header = sep.join(rows[0])
        path.write_text("\n".join([header, *(sep.join(quote(str(v)) for v in r.values()) for r in rows)]) + "\n")
    return path


def files_cfg(tmp_path: Path, fmt: str, train_rows=ROWS, dev_rows=ROWS[:1], suffix: str | None = None, **kw) -> TaskConfig:
    suffix = suffix or fmt
    train = write_rows(tmp_path / f"train.{suffix}", train_rows, fmt)
    dev = write_rows(tmp_path / f"dev.{suffix}", dev_rows, fmt)
    settings = {"text_columns": ["question", "answer"], "label_column": "verdict", "label_names": ["no", "yes"]}
    settings.update(kw)
    files = {"train": str(train), "dev": str(dev), **({"format": fmt} if suffix != fmt else {})}
    return TaskConfig(name="qa", source="files", files=files, **settings)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_files_source_maps_columns_and_string_labels(fmt, tmp_path):
    raw = load_raw(files_cfg(tmp_path, fmt))
    train = raw["train"]
    assert train["text_a"][:] == ["is it good, really?", "is it bad?", "maybe?"]
    assert train["text_b"][:] == ['yes, "very"', "no", "who knows"]
    assert train["label"][:] == [1, 0, 1]  # by name, by name, and an index in range
    assert len(raw["dev"]) == 1


def test_files_format_can_be_given_explicitly(tmp_path):
    assert len(load_raw(files_cfg(tmp_path, "tsv", suffix="txt"))["train"]) == 3


def test_glue_task_from_files_defaults_to_the_hub_column_names(tmp_path):
    rows = [{"sentence1": "a", "sentence2": "b", "label": "entailment"}, {"sentence1": "c", "sentence2": "d", "label": "not_entailment"}]
    cfg = TaskConfig(
        name="rte",
        source="files",
        files={"train": str(write_rows(tmp_path / "t.jsonl", rows, "jsonl")), "dev": str(write_rows(tmp_path / "d.jsonl", rows, "jsonl"))},
    )
    assert task_spec(cfg).text_columns == ("sentence1", "sentence2")
    assert load_raw(cfg)["train"]["label"][:] == [0, 1]


def test_custom_integer_labels_need_only_num_labels(tmp_path):
    rows = [{"text": "x", "label": 0}, {"text": "y", "label": 2}]
    cfg = files_cfg(tmp_path, "parquet", rows, rows, text_columns=["text"], label_column="label", label_names=None, num_labels=3)
    assert task_spec(cfg).label_names == ("0", "1", "2")
    assert load_raw(cfg)["train"]["label"][:] == [0, 2]


def test_a_labelled_test_file_is_read_like_train_and_dev(tmp_path):
    cfg = files_cfg(tmp_path, "csv")
    labelled = write_rows(tmp_path / "test.csv", ROWS[1:], "csv")
    split = sources.load_test_split(cfg.model_copy(update={"files": cfg.files.model_copy(update={"test": str(labelled)})}))
    assert split["text_a"][:] == ["is it bad?", "maybe?"] and split["text_b"][:] == ["no", "who knows"]
    assert split["label"][:] == [0, 1]


def test_a_test_file_without_labels_cannot_be_scored(tmp_path):
    cfg = files_cfg(tmp_path, "jsonl")
    unlabelled = write_rows(tmp_path / "test.jsonl", [{"question": "q?", "answer": "a"}], "jsonl")
    with pytest.raises(DataError, match=r"test\.jsonl: the test split has no labels \(no column 'verdict', task\.label_column\); "
                                        r"it cannot be scored"):
        sources.load_test_split(cfg.model_copy(update={"files": cfg.files.model_copy(update={"test": str(unlabelled)})}))
    with pytest.raises(DataError, match=r"task qa has no test split \(set task\.files\.test to a labelled file\)"):
        sources.load_test_split(cfg)


# ----------------------------------------------------------------------------------------------
# validation errors
# ----------------------------------------------------------------------------------------------


def test_missing_glue_file_names_the_path_and_the_layout(tmp_path):
    write_glue_task(tmp_path, "rte", {"train.tsv": GLUE_CASES["rte"][0]["train.tsv"]})
    with pytest.raises(DataError, match=r"RTE/dev\.tsv: file not found.*RTE"):
        load_raw(glue_cfg("rte", tmp_path))


def test_missing_files_source_file(tmp_path):
    files = {"train": str(tmp_path / "nope.csv"), "dev": "x.csv"}
    cfg = TaskConfig(name="qa", source="files", files=files, text_columns=["q"], label_names=["no", "yes"])
    with pytest.raises(DataError, match=r"nope\.csv: file not found \(task\.files\.train\)"):
        load_raw(cfg)


def test_missing_column_lists_the_columns_found(tmp_path):
    cfg = files_cfg(tmp_path, "csv", label_column="gold")
    with pytest.raises(DataError) as err:
        load_raw(cfg)
    assert "train.csv: missing column 'gold' (columns found: 'question', 'answer', 'verdict')" in str(err.value)


def test_label_outside_the_label_set_names_value_row_and_labels(tmp_path):
    rows = [*ROWS[:2], {"question": "q", "answer": "a", "verdict": "maybe"}]
    with pytest.raises(DataError) as err:
        load_raw(files_cfg(tmp_path, "tsv", rows))
    # line 1 is the header, so the third data row is line 4
    assert "train.tsv: line 4: label 'maybe' is not one of the task's labels (no, yes, or an index 0-1)" in str(err.value)


def test_integer_label_out_of_range(tmp_path):
    folder = write_glue_task(tmp_path, "sst2", {"train.tsv": tsv("sentence\tlabel", "ok\t1", "bad\t2"), "dev.tsv": tsv("sentence\tlabel", "x\t0")})
    with pytest.raises(DataError, match=r"SST-2/train\.tsv: line 3: label '2' is not one of the task's labels \(negative, positive"):
        load_raw(glue_cfg("sst2", folder))


def test_empty_split(tmp_path):
    write_glue_task(tmp_path, "rte", {"train.tsv": GLUE_CASES["rte"][0]["train.tsv"], "dev.tsv": "index\tsentence1\tsentence2\tlabel\n"})
    with pytest.raises(DataError, match=r"RTE/dev\.tsv: the dev split is empty"):
        load_raw(glue_cfg("rte", tmp_path))


def test_non_numeric_regression_label(tmp_path):
    files = dict(GLUE_CASES["stsb"][0])
    files["dev.tsv"] = files["dev.tsv"].replace("\t0.000", "\tn/a")
    write_glue_task(tmp_path, "stsb", files)
    with pytest.raises(DataError, match=r"STS-B/dev\.tsv: line 2: label 'n/a' is not a number"):
        load_raw(glue_cfg("stsb", tmp_path))


def test_short_row_names_its_line(tmp_path):
    write_glue_task(tmp_path, "rte", {"train.tsv": tsv("index\tsentence1\tsentence2\tlabel", "0\tonly one"), "dev.tsv": GLUE_CASES["rte"][0]["dev.tsv"]})
    with pytest.raises(DataError, match=r"train\.tsv: line 2: has 2 fields, expected 4"):
        load_raw(glue_cfg("rte", tmp_path))


def test_bad_parquet_label_names_its_row_index(tmp_path):
    rows = [{"question": "q", "answer": "a", "verdict": "yes"}, {"question": "q", "answer": "a", "verdict": None}]
    with pytest.raises(DataError, match=r"train\.parquet: row index 1: label None is not one of the task's labels"):
        load_raw(files_cfg(tmp_path, "parquet", rows))


def test_auto_source_with_a_custom_task_never_reads_a_glue_dir(tmp_path):
    cfg = TaskConfig(name="qa", source="auto", glue_dir=str(tmp_path), text_columns=["q"], label_names=["a", "b"])
    assert cfg.resolved_source() == "hub"


def test_custom_task_needs_its_labels():
    """Files carry no label names; a hub dataset's ClassLabel column may (test_hub_datasets.py)."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="needs task.label_names or task.num_labels"):
        TaskConfig(name="qa", source="files", files={"train": "a.csv", "dev": "b.csv"}, text_columns=["q"])
    assert TaskConfig(name="qa", source="hub", hub_path="x/y", text_columns=["q"]).label_names is None


def test_glue_task_rejects_a_different_label_order(tmp_path):
    with pytest.raises(DataError, match="hub's label order"):
        task_spec(glue_cfg("rte", tmp_path, label_names=["not_entailment", "entailment"]))


def test_hub_without_network_is_a_clear_error():
    started = time.monotonic()
    cfg = TaskConfig(name="rte", source="hub", hub_path="drydock-tests/no-such-dataset")
    with pytest.raises(DataError) as err:
        load_raw(cfg)
    assert "drydock-tests/no-such-dataset (config rte)" in str(err.value)
    assert "task.source: glue_dir" in str(err.value)
    assert time.monotonic() - started < 20  # offline mode fails fast instead of retrying


# ----------------------------------------------------------------------------------------------
# synthetic source
# ----------------------------------------------------------------------------------------------


def test_synthetic_task_is_deterministic_and_shaped_by_its_settings():
    cfg = TaskConfig(name="smoke", source="synthetic", synthetic={"num_train": 64, "num_dev": 16, "num_labels": 3, "min_words": 4, "max_words": 9})
    raw = load_raw(cfg)
    assert (len(raw["train"]), len(raw["dev"])) == (64, 16)
    assert set(raw["train"]["label"][:]) == {0, 1, 2}
    assert all(4 <= len(t.split()) <= 9 for t in raw["train"]["text_a"][:])
    assert raw["train"][:] == load_raw(cfg)["train"][:]
    other_seed = load_raw(cfg.model_copy(update={"sample_seed": 1}))
    assert raw["train"]["text_a"][:] != other_seed["train"]["text_a"][:]
    assert task_spec(cfg).label_names == ("class_0", "class_1", "class_2")


def test_synthetic_sentences_carry_only_their_own_class_cues():
    raw = load_raw(TaskConfig(name="smoke", source="synthetic", synthetic={"num_train": 200, "num_labels": 4}))
    for text, label in zip(raw["train"]["text_a"][:], raw["train"]["label"][:]):
        words = set(text.split())
        cues = [i for i, group in enumerate(synthetic._CUE_WORDS) if words & set(group)]
        assert cues == [label]


# ----------------------------------------------------------------------------------------------
# subsampling, tokenization and the cache
# ----------------------------------------------------------------------------------------------


def many_rte_rows(n: int) -> dict[str, str]:
    """Up to 64 distinct premises made of words the tiny tokenizer knows (digits would all be [UNK])."""
    words = ["truly", "wonderful", "moving", "film", "plot", "dull", "acting", "worse"]
    premise = [f"{words[i % 8]} {words[i // 8 % 8]}" for i in range(n)]
    rows = [f"{i}\t{premise[i]}\tthe film\t{'entailment' if i % 2 else 'not_entailment'}" for i in range(n)]
    return {"train.tsv": tsv("index\tsentence1\tsentence2\tlabel", *rows), "dev.tsv": tsv("index\tsentence1\tsentence2\tlabel", *rows[:10])}


def test_subsample_is_seeded():
    rows = datasets.Dataset.from_dict({"i": list(range(100))})
    first, again, other = (subsample(rows, 10, seed)["i"][:] for seed in (0, 0, 1))
    assert first == again and first != other
    assert len(first) == 10 and first == sorted(first)
    assert subsample(rows, None, 0) is rows and subsample(rows, 500, 0) is rows


def test_prepare_data_subsamples_identically_across_runs(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "rte", many_rte_rows(60))
    cfg = glue_cfg("rte", tmp_path, max_train_samples=12, max_eval_samples=4)
    first = prepare_data(cfg, tiny_tokenizer, tmp_path / "cache-a")
    second = prepare_data(cfg, tiny_tokenizer, tmp_path / "cache-b")
    other = prepare_data(cfg.model_copy(update={"sample_seed": 7}), tiny_tokenizer, tmp_path / "cache-c")
    assert (first.num_train, len(first.dev["dev"])) == (12, 4)
    assert first.train["input_ids"][:] == second.train["input_ids"][:]
    assert first.train["input_ids"][:] != other.train["input_ids"][:]


def test_prepare_data_tokenizes_without_padding(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "mnli")
    prepared = prepare_data(glue_cfg("mnli", tmp_path), tiny_tokenizer, tmp_path / "cache")
    assert prepared.task is GLUE["mnli"]
    assert set(prepared.dev) == {"dev", "dev_mismatched"}
    assert prepared.train.column_names == ["input_ids", "attention_mask", "token_type_ids", "labels"]
    lengths = [len(ids) for ids in prepared.train["input_ids"][:]]
    assert len(set(lengths)) == 2 and max(lengths) > 8  # each row its own length: no padding
    assert all(set(mask) == {1} for mask in prepared.train["attention_mask"][:])
    assert all(1 in types for types in prepared.train["token_type_ids"][:])  # pairs use segment B
    assert prepared.train["labels"][:] == [1, 0]
    truncated = prepare_data(glue_cfg("mnli", tmp_path, max_seq_length=8), tiny_tokenizer, tmp_path / "cache")
    assert [len(ids) for ids in truncated.train["input_ids"][:]] == [8, 8]


def test_regression_labels_are_float32(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "stsb")
    prepared = prepare_data(glue_cfg("stsb", tmp_path), tiny_tokenizer, tmp_path / "cache")
    assert prepared.train.features["labels"].dtype == "float32"
    assert prepared.train["labels"][:] == pytest.approx([5.0, 3.8])


def test_cache_is_reused_without_retokenizing(tmp_path, tiny_tokenizer, monkeypatch):
    write_glue_task(tmp_path, "rte")
    cfg, cache = glue_cfg("rte", tmp_path), tmp_path / "cache"
    first = prepare_data(cfg, tiny_tokenizer, cache)
    assert [p.name for p in cache.iterdir()] == [f"data-{first.fingerprint}"]  # no temp folder left

    def no_map(*args, **kwargs):
        raise AssertionError("the cached data was tokenized again")

    monkeypatch.setattr(datasets.Dataset, "map", no_map)
    second = prepare_data(cfg, tiny_tokenizer, cache)
    assert second.fingerprint == first.fingerprint
    assert second.train["input_ids"][:] == first.train["input_ids"][:]
    assert [p.name for p in cache.iterdir()] == [f"data-{first.fingerprint}"]


def test_fingerprint_follows_file_contents_not_size_or_mtime(tmp_path, tiny_tokenizer):
    folder = write_glue_task(tmp_path, "rte")
    cfg = glue_cfg("rte", tmp_path)
    before = fingerprint.data_fingerprint(cfg, tiny_tokenizer)
    train = folder / "train.tsv"
    stat = train.stat()
    train.write_text(train.read_text().replace("\tentailment", "\tentailmenT"))  # same size
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert train.stat().st_size == stat.st_size and train.stat().st_mtime_ns == stat.st_mtime_ns
    assert fingerprint.data_fingerprint(cfg, tiny_tokenizer) != before


def test_fingerprint_follows_tokenizer_and_settings(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "rte")
    cfg = glue_cfg("rte", tmp_path)
    base = fingerprint.data_fingerprint(cfg, tiny_tokenizer)
    tiny_tokenizer("uses the tokenizer once", truncation=True, max_length=3)  # mutates backend truncation state
    assert fingerprint.data_fingerprint(cfg, tiny_tokenizer) == base
    for change in ({"max_seq_length": 64}, {"max_train_samples": 5}, {"sample_seed": 3}):
        assert fingerprint.data_fingerprint(cfg.model_copy(update=change), tiny_tokenizer) != base
    from pipeline.prepare.text_tokenizer import train_wordpiece

    assert fingerprint.data_fingerprint(cfg, train_wordpiece(["other words entirely"], vocab_size=40)) != base


def test_concurrent_writer_wins_the_rename(tmp_path):
    def build_while_another_process_finishes(scratch: Path) -> None:
        (scratch / "mine").write_text("x")
        (tmp_path / "data-abc").mkdir()
        (tmp_path / "data-abc" / "theirs").write_text("y")

    folder = tokenized._cached(tmp_path, "data-abc", build_while_another_process_finishes)
    assert [p.name for p in folder.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == ["data-abc"]  # our scratch copy is gone


def test_prepare_unlabeled_adds_extra_text_and_drops_labels(tmp_path, tiny_tokenizer, monkeypatch):
    write_glue_task(tmp_path, "rte", many_rte_rows(30))
    extra = tmp_path / "extra.txt"
    extra.write_text("first extra line\n\n  second extra line  \n")
    cfg = glue_cfg("rte", tmp_path, max_train_samples=3)  # does not apply to unlabeled text
    unlabeled = prepare_unlabeled(cfg, tiny_tokenizer, tmp_path / "cache", max_samples=10, files=[str(extra)])
    assert unlabeled.column_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert len(unlabeled) == 10 + 2
    assert tiny_tokenizer.decode(unlabeled["input_ids"][-1], skip_special_tokens=True) == tiny_tokenizer.decode(
        tiny_tokenizer("second extra line")["input_ids"], skip_special_tokens=True
    )
    monkeypatch.setattr(datasets.Dataset, "map", lambda *a, **k: pytest.fail("re-tokenized"))
    again = prepare_unlabeled(cfg, tiny_tokenizer, tmp_path / "cache", max_samples=10, files=[str(extra)])
    assert again["input_ids"][:] == unlabeled["input_ids"][:]


def test_prepare_unlabeled_missing_extra_file(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path, "rte")
    with pytest.raises(DataError, match=r"missing\.txt: file not found"):
        prepare_unlabeled(glue_cfg("rte", tmp_path), tiny_tokenizer, tmp_path / "cache", None, [str(tmp_path / "missing.txt")])


def test_train_texts_covers_both_sides_of_a_pair(tmp_path):
    write_glue_task(tmp_path, "rte")
    texts = train_texts(load_raw(glue_cfg("rte", tmp_path)))
    assert len(texts) == 4 and "Pope Benedict XVI is the new leader." in texts


# ----------------------------------------------------------------------------------------------
# the real shared data
# ----------------------------------------------------------------------------------------------


@pytest.mark.data
def test_shared_sst2_and_rte_row_counts_match_the_release(glue_dir):
    sst2 = load_raw(glue_cfg("sst2", glue_dir))
    rte = load_raw(glue_cfg("rte", glue_dir))
    assert (len(sst2["train"]), len(sst2["dev"])) == (67_349, 872)
    assert (len(rte["train"]), len(rte["dev"])) == (2_490, 277)
    assert set(rte["train"]["label"][:]) == {0, 1}
    assert task_spec(glue_cfg("rte", glue_dir)).label_names == ("entailment", "not_entailment")
    first = rte["train"][0]
    assert (first["text_b"], first["label"]) == ("Weapons of Mass Destruction Found in Iraq.", 1)  # not_entailment
