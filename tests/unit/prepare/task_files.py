"""Task data written the way each source reads it (the GLUE release's own layouts, the user's files),
shared by the prepare stage's unit tests."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import TaskConfig
from pipeline.errors import DataError
from pipeline.prepare.sources import load_raw


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


def many_rte_rows(n: int) -> dict[str, str]:
    """Up to 64 distinct premises made of words the tiny tokenizer knows (digits would all be [UNK])."""
    words = ["truly", "wonderful", "moving", "film", "plot", "dull", "acting", "worse"]
    premise = [f"{words[i % 8]} {words[i // 8 % 8]}" for i in range(n)]
    rows = [f"{i}\t{premise[i]}\tthe film\t{'entailment' if i % 2 else 'not_entailment'}" for i in range(n)]
    return {"train.tsv": tsv("index\tsentence1\tsentence2\tlabel", *rows), "dev.tsv": tsv("index\tsentence1\tsentence2\tlabel", *rows[:10])}


GOOD = [{"question": "is it good?", "answer": "yes", "verdict": "yes"}, {"question": "is it bad?", "answer": "no", "verdict": "no"}]


def files_task(tmp_path: Path, train: Path, dev: Path | None = None, **kw) -> TaskConfig:
    if dev is None:
        dev = tmp_path / "dev.jsonl"
        dev.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    return TaskConfig(name="qa", source="files", files={"train": str(train), "dev": str(dev)},
                      text_columns=["question", "answer"], label_column="verdict", label_names=["no", "yes"], **kw)


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refused(cfg: TaskConfig) -> str:
    with pytest.raises(DataError) as info:
        load_raw(cfg)
    (line,) = info.value.problems
    return line


def many_lines(n: int) -> list[bytes]:
    # long enough that the text layer decodes past the bad byte's line long before the reader gets there
    return [f"question number {i} with some padding text to fill the block,answer {i},yes\n".encode() for i in range(n)]
