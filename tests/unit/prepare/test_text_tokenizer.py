"""The offline WordPiece tokenizer: BERT conventions, determinism, and a plain-transformers reload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from transformers import AutoTokenizer

from pipeline.prepare.text_tokenizer import SPECIAL_TOKENS, _learn_vocab, train_wordpiece
from tests.conftest import TINY_TEXTS


def test_special_tokens_come_first_and_pad_is_zero(tiny_tokenizer):
    assert tiny_tokenizer.pad_token_id == 0
    assert tiny_tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3, 4]
    assert (tiny_tokenizer.unk_token, tiny_tokenizer.cls_token, tiny_tokenizer.sep_token, tiny_tokenizer.mask_token) == (
        "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    )  # fmt: skip
    assert tiny_tokenizer.model_max_length == 512
    assert len(tiny_tokenizer) <= 100


def test_single_and_pair_inputs_follow_the_bert_template(tiny_tokenizer):
    single = tiny_tokenizer("a wonderful film")
    assert single["input_ids"][0] == tiny_tokenizer.cls_token_id
    assert single["input_ids"][-1] == tiny_tokenizer.sep_token_id
    assert set(single["token_type_ids"]) == {0}

    pair = tiny_tokenizer("a wonderful film", "i hated it")
    ids, types = pair["input_ids"], pair["token_type_ids"]
    first_sep = ids.index(tiny_tokenizer.sep_token_id)
    assert types[: first_sep + 1] == [0] * (first_sep + 1)
    assert types[first_sep + 1 :] == [1] * (len(ids) - first_sep - 1)
    assert ids[-1] == tiny_tokenizer.sep_token_id


def test_known_words_are_whole_tokens_and_unknown_ones_split():
    tokenizer = train_wordpiece(TINY_TEXTS * 4, vocab_size=200)  # room for every word of the corpus
    assert tokenizer.tokenize("The Plot was DULL") == ["the", "plot", "was", "dull"]  # lowercased
    assert tokenizer.tokenize("wonderfully") == ["wonderful", "##l", "##y"]


def test_training_is_deterministic():
    # tokenizers' own WordPieceTrainer gives a different vocabulary on every call (hash-order
    # tie-breaks); this is the regression test for learning the vocabulary ourselves.
    first = train_wordpiece(TINY_TEXTS * 4, vocab_size=100)
    second = train_wordpiece(iter(TINY_TEXTS * 4), vocab_size=100)
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()


def test_training_is_deterministic_across_processes(tiny_tokenizer):
    code = (
        "from pipeline.prepare.text_tokenizer import train_wordpiece; from tests.conftest import TINY_TEXTS; "
        "print(train_wordpiece(TINY_TEXTS * 4, vocab_size=100).backend_tokenizer.to_str())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert json.loads(out.stdout)["model"]["vocab"] == tiny_tokenizer.get_vocab()


def test_ties_break_by_merged_text():
    # "ab" and "cd" each occur twice: both pairs tie at count 2, "ab" < "cd" merges first.
    vocab = _learn_vocab(Counter({"ab": 2, "cd": 2}), vocab_size=len(SPECIAL_TOKENS) + 5)
    assert vocab[len(SPECIAL_TOKENS) :] == ["##b", "##d", "a", "c", "ab"]


def test_save_and_reload_with_plain_transformers(tiny_tokenizer, tmp_path):
    tiny_tokenizer.save_pretrained(tmp_path)
    assert "drydock" not in (tmp_path / "tokenizer_config.json").read_text()
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = ["an instant classic", "boring , predictable and far too long"]
    assert reloaded(texts, ["great cast", "zzz unseen"]) == tiny_tokenizer(texts, ["great cast", "zzz unseen"])
    assert reloaded.pad_token_id == 0 and reloaded.model_max_length == 512


def test_truncation_keeps_the_template(tiny_tokenizer):
    encoded = tiny_tokenizer("great performances from the whole cast", truncation=True, max_length=4)
    assert len(encoded["input_ids"]) == 4
    assert encoded["input_ids"][-1] == tiny_tokenizer.sep_token_id
