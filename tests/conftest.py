"""Shared fixtures: tiny random BERTs, an offline tokenizer, real data from ../shared/data.

Tests that read ../shared/data skip with a reason where it is absent (a fresh machine
elsewhere); `.ci/run` sets DRYDOCK_REQUIRE_SHARED_DATA=1, which turns that skip into a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

# Before anything imports ray or deepspeed: workers inherit the environment at ray.init.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
# One intra-op thread in every process the tests start: the drydock CLIs they run in subprocesses,
# and Ray's workers (Ray sets its own only where the variable is unset). Two pytest workers share
# two cores; a process with two OpenMP threads, one of them descheduled, waits at every op's
# barrier: the smoke teacher's 64 steps took 92 s with two threads beside a busy core and 4.0 s
# with one (docs/stack-facts.md, "OpenMP threads on a shared machine").
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

# Tiny models gain nothing from intra-op threads (and torch may have been imported before this
# file set OMP_NUM_THREADS): one thread keeps steps fast and steady.
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DRYDOCK_SHARED_DATA", ROOT.parent / "shared" / "data"))

TINY_TEXTS = [
    "a truly wonderful and moving film",
    "the plot was dull and the acting worse",
    "an instant classic that i loved",
    "boring , predictable and far too long",
    "great performances from the whole cast",
    "i hated every minute of it",
    "the music is lovely but the story is thin",
    "not good , not bad , just fine",
]


# The longest test files, longest first (`make test-all PYTEST_ARGS=--durations=0` lists them; the
# slow tier's files first, then the fast tier's: each run only meets its own).
# pytest-xdist hands files to its workers in collection order — given `--no-loadscope-reorder`
# (the Makefile passes it), else it sorts files by their number of tests and this order is lost —
# so these start first and the short files fill in around them, and the two workers end close
# together (docs/stack-facts.md, "Test files in xdist").
LONGEST_FIRST = [
    "integration/search/test_sweep.py", "integration/search/test_cluster_storage.py",
    "integration/search/test_deepspeed_sweep.py", "integration/test_retrain.py",
    "integration/search/test_search_resume.py", "integration/search/test_search_study.py",
    "integration/search/test_sweep_resume.py", "integration/api/test_example.py",
    "integration/training/test_deepspeed_equivalence.py", "integration/select/test_tracking_server.py",
    "integration/training/test_distributed_loop.py", "integration/search/test_interrupt.py",
    "integration/measure/test_latency_cluster.py", "integration/cli/test_train_cli.py",
    "integration/search/test_gpu_check.py", "integration/search/test_late_node.py",
    "integration/search/test_driver_placement.py", "integration/select/test_registry.py",
    "integration/select/test_onnx_champion.py", "integration/search/test_ray_instance.py",
]


def pytest_collection_modifyitems(config, items) -> None:
    def rank(item) -> int:
        path = Path(str(item.fspath)).as_posix()
        return next((i for i, name in enumerate(LONGEST_FIRST) if path.endswith("tests/" + name)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the order within a file and among the rest is kept


def _shared(sub: str) -> Path:
    path = SHARED_DATA / sub
    if not path.exists():
        if os.environ.get("DRYDOCK_REQUIRE_SHARED_DATA") == "1":
            pytest.fail(f"{path} is missing but DRYDOCK_REQUIRE_SHARED_DATA=1 (CI) requires it")
        pytest.skip(f"{path} is absent on this machine (shared data not laid out)")
    return path


@pytest.fixture
def glue_dir() -> Path:
    """The shared GLUE folder (SST-2, RTE in the canonical layout)."""
    return _shared("glue")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A WordPiece tokenizer trained offline on TINY_TEXTS (no hub access)."""
    from pipeline.prepare.text_tokenizer import train_wordpiece

    return train_wordpiece(TINY_TEXTS * 4, vocab_size=100)


def tiny_bert_config(
    vocab_size: int = 100,
    num_layers: int = 4,
    hidden_size: int = 32,
    num_heads: int = 4,
    intermediate_size: int = 64,
    num_labels: int = 2,
    max_position_embeddings: int = 128,
):
    """A 4-layer, 32-wide BERT: a step takes milliseconds on a CPU, and it keeps a real BERT's
    dropout, so training paths (dropout on, eval mode off) behave as they do at full size."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        num_labels=num_labels,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )


def make_tiny_bert(num_layers: int = 4, num_labels: int = 2, seed: int = 0, vocab_size: int = 100, **kw):
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    model = BertForSequenceClassification(
        tiny_bert_config(vocab_size=vocab_size, num_layers=num_layers, num_labels=num_labels, **kw)
    )
    return model.eval()


@pytest.fixture
def tiny_bert():
    return make_tiny_bert()


def make_batch(batch_size: int = 4, seq_len: int = 12, vocab_size: int = 100, num_labels: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=g)
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    for i in range(1, batch_size):  # ragged lengths (at least 2 tokens): padding must be handled
        attention_mask[i, max(2, seq_len - 2 * (i % seq_len)) :] = 0
    input_ids = input_ids * attention_mask
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": torch.zeros_like(input_ids),
    }
    if num_labels == 1:
        batch["labels"] = torch.rand(batch_size, generator=g) * 5
    else:
        batch["labels"] = torch.randint(0, num_labels, (batch_size,), generator=g)
    return batch


@pytest.fixture
def tiny_batch():
    return make_batch()


@pytest.fixture
def s3(monkeypatch, tmp_path):
    """A local S3-compatible server (moto's, on 127.0.0.1) with bucket `drydock-test`; the AWS
    variables point every client of this process (and of Ray nodes started after) at it, and
    DRYDOCK_CACHE_DIR is a fresh folder, so no mirror outlives the test."""
    from tests.s3server import BUCKET, s3_server

    with s3_server() as env:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("DRYDOCK_CACHE_DIR", str(tmp_path / "drydock-cache"))
        yield f"s3://{BUCKET}"


def variant(trial_id: str, runtime: str, metric: float, latency: float, path, size: int = 1000) -> dict:
    """One variants.parquet row at the front's shape 32x64 (figures by hand; ±5% intervals)."""
    return {"trial_id": trial_id, "runtime": runtime, "metric_name": "accuracy", "metric": metric, "latency_ms": latency,
            "latency_p90_ms": latency * 1.1, "latency_low_ms": latency * 0.95, "latency_high_ms": latency * 1.05,
            "speedup": 10.0 / latency, "speedup_low": 9.5 / latency, "speedup_high": 10.5 / latency,
            "speedup_same_runtime": 8.0 / latency, "size_bytes": size, "parity_max_abs_diff": 0.01, "path": str(path),
            "front_shape": "32x64", "device": "cpu", "threads": 2}


def variants_of(rows: list[dict]):
    """A typed variants.parquet table of `variant` rows."""
    import pandas as pd

    from pipeline.measure.table import typed

    return typed(pd.DataFrame(rows))


class FakeTracker:
    """The select stage's view of MLflow (`pipeline.tracking.SweepTracker`), recording the parent run's artifacts."""

    uri = "sqlite:///nowhere.db"
    experiment_id = "0"
    parent_id = None

    def __init__(self) -> None:
        self.artifacts: list[Path] = []

    def log_parent_artifact(self, path, artifact_path=None) -> None:
        self.artifacts.append(Path(path))

    def log_parent(self, **kw) -> None:
        pass

    def log_metrics(self, *a, **kw) -> None:
        pass

    def set_tags(self, *a, **kw) -> None:
        pass
