"""Runtime variants (pipeline/measure/engines.py) on tiny random BERTs: the ONNX export's dynamic
axes, CoFi's pruned architecture, int8 size and bound, reuse keyed by content, the parity check's
refusal, and dev-set scoring through each runtime."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch

from methods._pruned_bert import PrunedBertConfig, PrunedBertForSequenceClassification
from methods.base import TaskInfo
from pipeline.errors import DrydockError
from pipeline.measure import engines as runtimes
from pipeline.measure.engines import (
    INT8_FILE,
    ONNX_FILE,
    TOLERANCES,
    build_variant,
    check_parity,
    evaluate_variant,
    load_runner,
    logit_scale,
    pad_batch,
    predict_logits,
)
from pipeline.prepare.metrics import compute_metrics
from pipeline.training.export import save_student
from tests.conftest import TINY_TEXTS, make_batch, make_tiny_bert

TASK = TaskInfo(name="sst2", num_labels=2, regression=False, label_names=("negative", "positive"))
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _batch(batch_size: int, seq_len: int, vocab_size: int = 100, seed: int = 3) -> dict[str, np.ndarray]:
    """Token ids with ragged padding (every row after the first is padded)."""
    batch = make_batch(batch_size, seq_len, vocab_size=vocab_size, seed=seed)
    return {name: batch[name].numpy() for name in INPUTS}


def _torch_logits(folder: Path, batch: dict[str, np.ndarray]) -> np.ndarray:
    return load_runner(build_variant(folder, "torch", folder), threads=1)(batch)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "model"
    make_tiny_bert(seed=0).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_onnx(tiny, tmp_path_factory) -> runtimes.Variant:
    # traced at 16 tokens: the checks below run at other lengths and batch sizes
    return build_variant(tiny, "onnxruntime", tmp_path_factory.mktemp("variants"), seq_length_hint=16)


@pytest.mark.parametrize(("batch_size", "seq_len"), [(1, 5), (7, 40)])
def test_onnx_logits_equal_torch_at_other_batch_sizes_and_lengths(tiny, tiny_onnx, batch_size, seq_len):
    runner = load_runner(tiny_onnx, threads=1)
    assert runner.input_names == INPUTS
    assert runner.session.get_session_options().intra_op_num_threads == 1
    batch = _batch(batch_size, seq_len)
    expected = _torch_logits(tiny, batch)
    got = runner(batch)
    assert got.shape == (batch_size, 2) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
    # torch tensors and extra keys (labels) are accepted too
    torch_batch = {k: torch.as_tensor(v) for k, v in batch.items()} | {"labels": torch.zeros(batch_size, dtype=torch.long)}
    np.testing.assert_allclose(runner(torch_batch), got, rtol=0, atol=0)


def test_variant_sizes_are_the_files_a_consumer_ships(tiny, tiny_onnx):
    assert tiny_onnx.path == tiny_onnx.path.parent / ONNX_FILE
    assert tiny_onnx.files == (tiny_onnx.path,)  # no external data below 2 GB
    assert tiny_onnx.size_bytes == tiny_onnx.path.stat().st_size
    eager = build_variant(tiny, "torch", tiny_onnx.path.parent)
    assert eager.path == tiny and eager.files == (tiny / "model.safetensors",)
    assert eager.size_bytes == (tiny / "model.safetensors").stat().st_size
    assert eager.source_digest == tiny_onnx.source_digest
    with pytest.raises(DrydockError, match="runtime 'tensorrt': unknown"):
        build_variant(tiny, "tensorrt", tiny_onnx.path.parent)


def _cofi_folder(root: Path, tokenizer) -> Path:
    """A pruned student as CoFi exports it: per-layer heads and FFN widths, one layer without
    attention and one without FFN, the architecture shipped as `_pruned_bert.py`."""
    torch.manual_seed(4)
    config = PrunedBertConfig(
        vocab_size=100, hidden_size=21, pooler_size=32, attention_head_size=8, layer_heads=[2, 4, 0, 4],
        layer_intermediate=[53, 0, 53, 53], max_position_embeddings=128, num_labels=2,
    )
    model = PrunedBertForSequenceClassification(config).eval()
    return save_student(model, tokenizer, root / "cofi", TASK, {"method": "cofi"})


def test_cofi_pruned_export_matches_torch_in_fp32_and_int8(tmp_path, tiny_tokenizer):
    folder = _cofi_folder(tmp_path, tiny_tokenizer)
    assert json.loads((folder / "config.json").read_text())["auto_map"]  # loaded through its recorded code
    fp32 = build_variant(folder, "onnxruntime", tmp_path / "variants", seq_length_hint=16)
    int8 = build_variant(folder, "onnxruntime-int8", tmp_path / "variants", seq_length_hint=16)
    for batch_size, seq_len in [(2, 9), (5, 33)]:
        batch = _batch(batch_size, seq_len, seed=batch_size)
        expected = _torch_logits(folder, batch)
        np.testing.assert_allclose(load_runner(fp32, threads=1)(batch), expected, rtol=0, atol=1e-4)
    assert 0 < check_parity(folder, int8, batch) <= TOLERANCES["onnxruntime-int8"] * logit_scale(expected)


def test_a_cofi_folder_is_tokenized_without_asking_to_run_its_code(tmp_path, tiny_tokenizer, monkeypatch):
    """The tokenizer reads config.json's auto_map: without trust_remote_code, transformers asks on
    stdin whether to run the code (seen in benchmarks/runtimes.py on a CoFi student); the select
    stage's worker has no one to answer."""
    from pipeline.measure.job import tokenize

    folder = _cofi_folder(tmp_path, tiny_tokenizer)

    prompts: list[str] = []

    def no_one_there(question=""):  # transformers catches what this raises and goes on: record the asking
        prompts.append(question)
        raise EOFError

    monkeypatch.setattr("builtins.input", no_one_there)
    rows, pad = tokenize(folder, ["a short text", "another one"], None, 16)
    assert prompts == []
    assert rows[0]["input_ids"] == tiny_tokenizer("a short text")["input_ids"] and pad == tiny_tokenizer.pad_token_id


def test_cofi_code_that_is_not_the_recorded_code_is_never_exported(tmp_path, tiny_tokenizer):
    folder = _cofi_folder(tmp_path, tiny_tokenizer)
    code = folder / "_pruned_bert.py"
    code.write_text(code.read_text() + "\nprint('not the exported code')\n")
    with pytest.raises(DrydockError, match="_pruned_bert.py: SHA-256"):
        build_variant(folder, "onnxruntime", tmp_path / "variants")
    assert not (tmp_path / "variants" / ONNX_FILE).exists()


def test_int8_file_is_smaller_and_its_logits_within_the_int8_bound(tmp_path):
    folder = tmp_path / "wide"
    make_tiny_bert(num_layers=2, vocab_size=1000, hidden_size=128, intermediate_size=512, seed=2).save_pretrained(folder)
    fp32 = build_variant(folder, "onnxruntime", tmp_path / "variants", seq_length_hint=16)
    exported_at = fp32.path.stat().st_mtime_ns
    int8 = build_variant(folder, "onnxruntime-int8", tmp_path / "variants", seq_length_hint=16)
    assert int8.path.name == INT8_FILE and fp32.path.stat().st_mtime_ns == exported_at  # quantized from the same export
    # 2.28 MB → 0.64 MB measured: the linear layers' weights (and the embeddings, as fp32) dominate
    assert int8.size_bytes < 0.4 * fp32.size_bytes
    batch = _batch(6, 24, vocab_size=1000)
    expected = _torch_logits(folder, batch)
    got = load_runner(int8, threads=1)(batch)
    difference = float(np.max(np.abs(got - expected)))
    assert 1e-5 < difference <= TOLERANCES["onnxruntime-int8"] * logit_scale(expected)  # int8 did change the weights
    assert check_parity(folder, int8, batch) == pytest.approx(difference, abs=1e-6)


def test_a_stale_or_edited_onnx_file_is_rebuilt_and_an_intact_one_reused(tmp_path):
    folder, out = tmp_path / "model", tmp_path / "variants"
    make_tiny_bert(num_layers=1, seed=0).save_pretrained(folder)
    first = build_variant(folder, "onnxruntime", out, seq_length_hint=8)
    again = build_variant(folder, "onnxruntime", out, seq_length_hint=8)
    assert not first.reused and again.reused and again == replace(first, reused=True)

    make_tiny_bert(num_layers=1, seed=1).save_pretrained(folder)  # retrained: new weights, same file names
    batch = _batch(3, 10)
    retrained = build_variant(folder, "onnxruntime", out, seq_length_hint=8)
    assert not retrained.reused and retrained.source_digest != first.source_digest
    np.testing.assert_allclose(load_runner(retrained, threads=1)(batch), _torch_logits(folder, batch), rtol=0, atol=1e-4)

    with open(retrained.path, "ab") as f:  # edited by hand (or truncated by a crash elsewhere)
        f.write(b"\0")
    rebuilt = build_variant(folder, "onnxruntime", out, seq_length_hint=8)
    assert not rebuilt.reused
    np.testing.assert_allclose(load_runner(rebuilt, threads=1)(batch), _torch_logits(folder, batch), rtol=0, atol=1e-4)
    assert sorted(p.name for p in out.iterdir()) == [ONNX_FILE, ONNX_FILE + runtimes.STAMP_SUFFIX]  # no temporary left
    assert rebuilt.path.stat().st_mode & 0o777 == 0o644  # readable by a consumer, as a saved folder is


def test_check_parity_refuses_a_variant_of_other_weights_with_the_numbers(tiny, tiny_onnx, tmp_path):
    batch = _batch(4, 12)
    assert check_parity(tiny, tiny_onnx, batch) < 1e-5
    other = tmp_path / "other"
    make_tiny_bert(seed=9).save_pretrained(other)
    difference = float(np.max(np.abs(_torch_logits(other, batch) - _torch_logits(tiny, batch))))
    assert difference > 1e-2  # what a wrong graph looks like, far above the fp32 tolerance
    with pytest.raises(DrydockError) as raised:
        check_parity(other, tiny_onnx, batch)
    message = str(raised.value)
    assert str(other) in message and "onnxruntime" in message
    assert f"by {difference:.3g} (max abs)" in message and "more than the 0.001 allowed" in message


def test_evaluate_variant_scores_torch_and_onnxruntime_alike(tiny, tiny_onnx, tiny_tokenizer):
    encoded = tiny_tokenizer(TINY_TEXTS)
    rows = [{"input_ids": ids, "token_type_ids": types} for ids, types in zip(encoded["input_ids"], encoded["token_type_ids"])]
    labels = np.array([1, 0, 1, 0, 1, 0, 0, 1])
    eager = load_runner(build_variant(tiny, "torch", tiny), threads=1)
    onnx = load_runner(tiny_onnx, threads=1)

    logits = predict_logits(eager, rows, batch_size=3)  # batches of 3, 3 and 2 rows, each padded to its longest
    assert logits.shape == (8, 2)
    one_by_one = np.concatenate([eager(pad_batch([row])) for row in rows])
    np.testing.assert_allclose(logits, one_by_one, rtol=0, atol=1e-5)  # padding changes nothing
    np.testing.assert_allclose(predict_logits(onnx, rows, batch_size=3), logits, rtol=0, atol=1e-4)
    # a tokenized dev split as the sweep caches it: a slice of a Dataset is a dict of columns
    dataset = datasets.Dataset.from_list([{**row, "labels": int(label)} for row, label in zip(rows, labels)])
    np.testing.assert_allclose(predict_logits(onnx, dataset, batch_size=3), predict_logits(onnx, rows, batch_size=3), rtol=0, atol=0)

    expected = compute_metrics(["accuracy", "f1"], logits, labels, regression=False)
    for runner in (eager, onnx):
        assert evaluate_variant(runner, rows, labels, ["accuracy", "f1"], False, batch_size=3) == pytest.approx(expected)
    assert set(expected) == {"accuracy", "f1", "combined"}
    with pytest.raises(DrydockError, match="8 rows but 7 labels"):
        evaluate_variant(onnx, rows, labels[:7], ["accuracy"], False)
    with pytest.raises(DrydockError, match="no rows"):
        evaluate_variant(onnx, [], [], ["accuracy"], False)


def test_predict_logits_batches_rows_of_similar_length_and_answers_in_their_order():
    # rows of 1 and 30 tokens in turn: in order every batch of 2 pads to 30, by length only the long pairs do
    rows = [{"input_ids": [i] + [5] * (29 * (i % 2))} for i in range(1, 13)]
    seen: list[tuple[int, ...]] = []

    def runner(batch):
        seen.append(batch["input_ids"].shape)
        return batch["input_ids"][:, :1].astype(np.float32)  # each row's first token: its identity

    logits = predict_logits(runner, rows, batch_size=2)
    assert sum(b * n for b, n in seen) == 6 * 1 + 6 * 30
    assert logits[:, 0].tolist() == list(range(1, 13))
    dataset = datasets.Dataset.from_list(rows)
    assert predict_logits(runner, dataset, batch_size=2)[:, 0].tolist() == list(range(1, 13))
