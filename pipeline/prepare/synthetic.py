"""The `synthetic` source: a generated task that a tiny model learns in a few hundred steps (smoke runs)."""

from __future__ import annotations

import random

import datasets

from pipeline.config import TaskConfig
from pipeline.prepare.rows import make_split
from pipeline.prepare.tasks import TaskSpec

# Each class has its own cue words; every sentence carries one or more cues of its class (and none
# of another) amid shared filler, so a single word decides the label: separable by bag of words,
# yet the model must still learn to route that word to [CLS]. The generator uses `random.Random`
# seeded by a string, which gives the same sentences on every platform and Python version.
_CUE_WORDS = (
    ("sunny", "bright", "golden", "cheerful"),
    ("stormy", "gloomy", "bitter", "dreary"),
    ("rocket", "orbit", "planet", "comet"),
    ("violin", "melody", "chorus", "rhythm"),
    ("harvest", "orchard", "barley", "meadow"),
    ("glacier", "frost", "tundra", "blizzard"),
    ("market", "ledger", "invoice", "auction"),
    ("castle", "knight", "dragon", "throne"),
)
_FILLER_WORDS = (
    "the", "a", "this", "that", "one", "day", "story", "place", "thing", "people", "was", "is",
    "seemed", "felt", "and", "but", "with", "about", "very", "quite", "rather", "often", "then",
    "again", "we", "they", "it", "some", "many", "few", "old", "new", "small", "large", "here",
    "there", "today", "later", "around", "through",
)  # fmt: skip
SYNTHETIC_VERSION = 1  # part of the fingerprint: bump when the generator changes


def load_synthetic(cfg: TaskConfig, spec: TaskSpec) -> dict[str, datasets.Dataset]:
    settings = cfg.synthetic
    sizes = {"train": settings.num_train, "dev": settings.num_dev}
    splits = {}
    for split, size in sizes.items():
        rng = random.Random(f"drydock-synthetic/{cfg.sample_seed}/{split}")
        rows = [_synthetic_row(rng, spec.num_labels, settings.min_words, settings.max_words) for _ in range(size)]
        splits[split] = make_split([[text for text, _ in rows]], [label for _, label in rows], regression=False)
    return splits


def _synthetic_row(rng: random.Random, num_labels: int, min_words: int, max_words: int) -> tuple[str, int]:
    label = rng.randrange(num_labels)
    length = rng.randint(min_words, max_words)
    num_cues = max(1, length // 4)
    words = [rng.choice(_FILLER_WORDS) for _ in range(length - num_cues)]
    for _ in range(num_cues):
        words.insert(rng.randint(0, len(words)), rng.choice(_CUE_WORDS[label]))
    return " ".join(words), label
