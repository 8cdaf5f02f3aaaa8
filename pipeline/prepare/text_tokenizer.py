"""A BERT-style WordPiece tokenizer trained offline on the task's own text.

Tests, smoke runs and `teacher.model: random` need a tokenizer without any hub access. Wrapping
it as a `PreTrainedTokenizerFast` means `save_pretrained` writes a folder that plain
`transformers.AutoTokenizer.from_pretrained` reloads in a process that has never heard of
drydock (which is how exported students are consumed).

Why the vocabulary is learned here and not by `tokenizers.trainers.WordPieceTrainer`: that
trainer breaks ties between equally frequent pairs by Rust hash-map order, which is seeded per
process, so the same text gives a different vocabulary in every process. The tokenizer is part of
the data fingerprint and of every cached teacher, so it must be a pure function of its input.
`_learn_vocab` runs the same algorithm (byte-pair merges over `##`-prefixed continuation pieces,
most frequent pair first) with ties broken by the merged string. Normalisation, pre-tokenisation,
the WordPiece model and the `[CLS]/[SEP]` template are the `tokenizers` library's own.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import pairwise

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)
from transformers import PreTrainedTokenizerFast

# [PAD] first, so its id is 0: BERT embeddings and the loop's dynamic padding both assume it.
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONTINUATION = "##"
MODEL_MAX_LENGTH = 512

Pair = tuple[str, str]


def train_wordpiece(texts: Iterable[str], vocab_size: int, lowercase: bool = True) -> PreTrainedTokenizerFast:
    """Train a WordPiece tokenizer on `texts`; the same texts always give the same tokenizer."""
    normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    words = _count_words(texts, normalizer, pre_tokenizer)
    vocab = _learn_vocab(words, vocab_size)
    backend = Tokenizer(
        models.WordPiece({token: i for i, token in enumerate(vocab)}, unk_token="[UNK]", continuing_subword_prefix=CONTINUATION)
    )
    backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.WordPiece(prefix=CONTINUATION)
    backend.post_processor = _bert_template(backend)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=MODEL_MAX_LENGTH,
        # transformers 5 returns only input_ids/attention_mask unless told BERT wants segments.
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        do_lower_case=lowercase,
    )


def _count_words(
    texts: Iterable[str], normalizer: normalizers.Normalizer, pre_tokenizer: pre_tokenizers.PreTokenizer
) -> Counter[str]:
    """Words exactly as the finished tokenizer will see them, so every learned piece is reachable."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def _learn_vocab(word_counts: Counter[str], vocab_size: int) -> list[str]:
    """Special tokens, then the most frequent symbols, then merged pieces in merge order."""
    words = sorted(word_counts)
    counts = [word_counts[w] for w in words]
    pieces = [[w[0]] + [CONTINUATION + c for c in w[1:]] for w in words]
    vocab = SPECIAL_TOKENS + _alphabet(pieces, counts, vocab_size - len(SPECIAL_TOKENS))
    known = set(vocab)
    merges = _PairIndex(pieces, counts)
    while len(vocab) < vocab_size:
        pair = merges.pop_best()
        if pair is None:
            break  # every word is a single piece: nothing left to merge
        merged = _join(*pair)
        merges.apply(pair, merged)
        if merged not in known:
            known.add(merged)
            vocab.append(merged)
    return vocab


def _alphabet(pieces: list[list[str]], counts: list[int], limit: int) -> list[str]:
    """The `limit` most frequent single-character symbols (ties by text); the rest become [UNK]."""
    frequency: Counter[str] = Counter()
    for symbols, n in zip(pieces, counts):
        for symbol in symbols:
            frequency[symbol] += n
    ranked = sorted(frequency, key=lambda s: (-frequency[s], s))[: max(limit, 0)]
    return sorted(ranked)


def _join(left: str, right: str) -> str:
    return left + right.removeprefix(CONTINUATION)


class _PairIndex:
    """Pair frequencies over all words, updated incrementally as merges rewrite the words.

    A heap with lazy deletion finds the most frequent pair in O(log n); recounting every pair
    after every merge would take minutes on SST-2 instead of seconds.
    """

    def __init__(self, pieces: list[list[str]], counts: list[int]):
        self.pieces = pieces
        self.counts = counts
        self.pair_count: Counter[Pair] = Counter()
        self.pair_words: defaultdict[Pair, set[int]] = defaultdict(set)
        self.heap: list[tuple[int, str, Pair]] = []
        for i in range(len(pieces)):
            self._add_word(i)
        for pair in self.pair_count:
            self._push(pair)

    def pop_best(self) -> Pair | None:
        """The most frequent pair; among equals, the one whose merged text sorts first."""
        while self.heap:
            negative_count, _, pair = heapq.heappop(self.heap)
            if self.pair_count.get(pair, 0) == -negative_count > 0:
                return pair
        return None

    def apply(self, pair: Pair, merged: str) -> None:
        touched: set[Pair] = set()
        for i in sorted(self.pair_words.pop(pair, ())):
            touched.update(self._remove_word(i))
            self.pieces[i] = _merge_symbols(self.pieces[i], pair, merged)
            touched.update(self._add_word(i))
        self.pair_count.pop(pair, None)
        for other in sorted(touched - {pair}):
            if self.pair_count.get(other, 0) > 0:
                self._push(other)

    def _push(self, pair: Pair) -> None:
        heapq.heappush(self.heap, (-self.pair_count[pair], _join(*pair), pair))

    def _word_pairs(self, i: int) -> list[Pair]:
        return list(pairwise(self.pieces[i]))

    def _add_word(self, i: int) -> list[Pair]:
        pairs = self._word_pairs(i)
        for pair in pairs:
            self.pair_count[pair] += self.counts[i]
            self.pair_words[pair].add(i)
        return pairs

    def _remove_word(self, i: int) -> list[Pair]:
        pairs = self._word_pairs(i)
        for pair in pairs:
            self.pair_count[pair] -= self.counts[i]
            self.pair_words[pair].discard(i)
        return pairs


def _merge_symbols(symbols: list[str], pair: Pair, merged: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def _bert_template(backend: Tokenizer) -> processors.TemplateProcessing:
    """`[CLS] a [SEP]` / `[CLS] a [SEP] b [SEP]`, with token type 1 on the second segment."""
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    return processors.TemplateProcessing(
        single="[CLS] $A:0 [SEP]:0",
        pair="[CLS] $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
