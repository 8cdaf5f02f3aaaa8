"""Half-precision eager variants (`torch-fp16`, `torch-bf16`) and every variant's peak memory
(pipeline/measure/engines.py, pipeline/measure/job.py) on tiny random BERTs, on the CPU:
the cast model's logits within their tolerance of fp32 and refused beyond it, the size at two
bytes a weight, and the peak resident set — positive, growing with the model, and null with a
reason when the kernel cannot reset it."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from methods.base import TaskInfo
from pipeline.errors import DrydockError
from pipeline.measure import engines as runtimes
from pipeline.measure.engines import (
    TOLERANCES,
    build_variant,
    check_parity,
    load_runner,
    logit_scale,
    measure_peak_memory,
    weights_bytes,
)
from pipeline.measure.interleaved import InterleaveSettings
from pipeline.measure.job import DevRows, Entry, VariantJob, latency_inputs, measure_memory, memory_shape, run_variant_job
from pipeline.training.export import save_student
from tests.conftest import TINY_TEXTS, make_batch, make_tiny_bert

HALF = {"torch-fp16": torch.float16, "torch-bf16": torch.bfloat16}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TASK = TaskInfo(name="synthetic", num_labels=2, regression=False, label_names=("class_0", "class_1"))


def _batch(batch_size: int = 8, seq_len: int = 24, seed: int = 3) -> dict[str, np.ndarray]:
    batch = make_batch(batch_size, seq_len, seed=seed)
    return {name: batch[name].numpy() for name in INPUTS}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("half") / "model"
    make_tiny_bert(seed=0).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("runtime", sorted(HALF))
def test_half_precision_variant_is_the_folder_cast_and_within_its_tolerance(tiny, tmp_path, runtime):
    variant = build_variant(tiny, runtime, tmp_path / "out")
    assert variant.runtime == runtime and variant.path == tiny and variant.files == (tiny / "model.safetensors",)
    assert not (tmp_path / "out").exists()  # nothing written
    # two bytes a weight: every tensor of the folder is floating, and the file is fp32 plus its header
    state = load_file(tiny / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in state.values())
    assert variant.size_bytes == 2 * sum(t.numel() for t in state.values())
    fp32_size = build_variant(tiny, "torch", tmp_path / "out").size_bytes
    assert variant.size_bytes == (fp32_size - _header(tiny)) / 2  # the fp32 file less its header (4% of a tiny one), halved

    runner = load_runner(variant, threads=1)
    assert runner.runtime == runtime
    assert {p.dtype for p in runner.model.parameters()} == {HALF[runtime]}
    batch = _batch()
    got = runner(batch)
    expected = load_runner(build_variant(tiny, "torch", tiny), threads=1)(batch)
    assert got.dtype == np.float32 and got.shape == expected.shape == (8, 2)
    difference = float(np.max(np.abs(got - expected)))
    # the cast changed the logits (fp16 rounds to 11 significant bits, bf16 to 8), within the bound
    assert 1e-6 < difference <= TOLERANCES[runtime] * logit_scale(expected)
    assert check_parity(tiny, variant, batch) == pytest.approx(difference, abs=1e-7)
    # torch tensors in, extra keys ignored: the same logits
    as_tensors = {k: torch.as_tensor(v) for k, v in batch.items()} | {"labels": torch.zeros(8, dtype=torch.long)}
    np.testing.assert_array_equal(runner(as_tensors), got)


def test_bf16_is_coarser_than_fp16(tiny):
    """7 mantissa bits against 10: on the same batch bf16 is further from fp32 than fp16 is."""
    batch = _batch(16, 32, seed=5)
    expected = load_runner(build_variant(tiny, "torch", tiny), 1)(batch)
    fp16, bf16 = (float(np.max(np.abs(load_runner(build_variant(tiny, rt, tiny), 1)(batch) - expected))) for rt in ("torch-fp16", "torch-bf16"))
    assert fp16 < bf16


@pytest.mark.parametrize("runtime", sorted(HALF))
def test_parity_refuses_a_tolerance_below_the_rounding_and_other_weights(tiny, tmp_path, runtime):
    batch = _batch()
    variant = build_variant(tiny, runtime, tmp_path)
    difference = check_parity(tiny, variant, batch)
    with pytest.raises(DrydockError) as raised:
        check_parity(tiny, variant, batch, tolerances={runtime: difference / 2})
    assert f"by {difference:.3g} (max abs), more than the {difference / 2:.3g} allowed for {runtime}" in str(raised.value)

    # the same model with its classifier's first bias moved by 0.5: logit 0 moves by 0.5 on every row
    perturbed = tmp_path / "perturbed"
    perturbed.mkdir()
    for name in ("config.json",):
        (perturbed / name).write_bytes((tiny / name).read_bytes())
    state = load_file(tiny / "model.safetensors")
    state["classifier.bias"] = state["classifier.bias"] + torch.tensor([0.5, 0.0])
    save_file(state, perturbed / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(DrydockError) as raised:
        check_parity(tiny, build_variant(perturbed, runtime, tmp_path), batch)
    message = str(raised.value)
    assert str(tiny) in message and runtime in message
    shift = float(message.split(" by ")[1].split(" ")[0])
    assert shift == pytest.approx(0.5, abs=TOLERANCES[runtime])


def test_weights_bytes_reads_safetensors_headers_and_bin_files_alike(tiny, tmp_path):
    state = load_file(tiny / "model.safetensors")
    numel = sum(t.numel() for t in state.values())
    assert weights_bytes([tiny / "model.safetensors"], 4) == 4 * numel == (tiny / "model.safetensors").stat().st_size - _header(tiny)
    torch.save({**state, "ids": torch.arange(10)}, tmp_path / "pytorch_model.bin")  # an int64 tensor stays 8 bytes an element
    assert weights_bytes([tmp_path / "pytorch_model.bin"], 2) == 2 * numel + 80


def _header(folder: Path) -> int:
    with open(folder / "model.safetensors", "rb") as f:
        return 8 + int.from_bytes(f.read(8), "little")


# ----------------------------------------------------------------------------------------------
# peak memory
# ----------------------------------------------------------------------------------------------


def _peak(folder: Path, runtime: str, shape: tuple[int, int] = (4, 32)) -> runtimes.PeakMemory:
    config = {"vocab_size": 100}
    return measure_peak_memory(build_variant(folder, runtime, folder), 1, latency_inputs(config, *shape))


def _peak_resets() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


PEAK_RESETS = _peak_resets()  # gVisor and some CI sandboxes have no writable clear_refs: the figure is then null
needs_peak = pytest.mark.skipif(not PEAK_RESETS, reason="the peak resident set cannot be reset here (/proc/self/clear_refs)")


@needs_peak
def test_peak_memory_is_positive_and_grows_with_the_model(tmp_path):
    small, big = tmp_path / "small", tmp_path / "big"
    make_tiny_bert(num_layers=2, hidden_size=64, intermediate_size=256, seed=0).save_pretrained(small)
    # 2 × (4 × 512² + 2 × 512 × 2048) + embeddings: 6.4 M weights, 25.6 MB in fp32
    make_tiny_bert(num_layers=2, hidden_size=512, num_heads=8, intermediate_size=2048, seed=0).save_pretrained(big)
    big_weights = weights_bytes([big / "model.safetensors"], 4)
    assert big_weights > 25e6
    _peak(small, "torch")  # the first load in a process pays for lazy initialisation, not the model
    small_peak, big_peak = _peak(small, "torch"), _peak(big, "torch")
    assert small_peak.bytes is not None and big_peak.bytes is not None, (small_peak, big_peak)
    assert 0 <= small_peak.bytes < big_peak.bytes  # a model of ~0.4 MB is below the resolution: it may read 0
    # the bigger model's weights are resident at its peak: at least most of them, beyond the small one's whole peak
    assert big_peak.bytes - small_peak.bytes > 0.75 * big_weights, (small_peak, big_peak)
    assert big_peak.bytes < 4 * big_weights + 50e6  # and not the process's lifetime peak
    assert "VmHWM" in big_peak.method


def test_peak_memory_is_null_with_the_reason_when_the_peak_cannot_be_reset(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(runtimes, "CLEAR_REFS", tmp_path / "no-proc" / "clear_refs")
    peak = _peak(tiny, "torch")
    assert peak.bytes is None and peak.method.startswith("cannot reset the peak resident set") and "no-proc" in peak.method

    # a write the kernel takes without resetting VmHWM (a plain file here): refused, not a lifetime peak
    monkeypatch.setattr(runtimes, "CLEAR_REFS", tmp_path / "clear_refs")
    block = np.ones(64 << 20, dtype=np.uint8)  # 64 MB resident, then handed back: VmHWM stays above VmRSS
    del block
    peak = _peak(tiny, "torch")
    assert peak.bytes is None and "did not reset VmHWM" in peak.method

    # in the stage: the entries keep a null figure and the log says why, once for all of them
    entries = [Entry("teacher", tiny, rt, config={"vocab_size": 100, "max_position_embeddings": 128},
                     variant=build_variant(tiny, rt, tiny)) for rt in ("torch", "torch-bf16")]
    entries.append(Entry("s0", tiny, "torch", error="RuntimeError: broken"))
    lines: list[str] = []
    monkeypatch.setattr(runtimes, "CLEAR_REFS", tmp_path / "no-proc" / "clear_refs")
    measure_memory(entries, [(1, 16), (2, 8)], threads=1, log=lines.append)
    assert [e.peak_memory_bytes for e in entries] == [None, None, None]
    (line,) = lines
    assert line.startswith("variants: peak memory not measured for teacher/torch, teacher/torch-bf16: cannot reset the peak resident set")


def test_memory_shape_is_the_largest_timed_shape_the_model_takes():
    shapes = [(1, 128), (32, 64), (4, 16)]
    assert memory_shape({"max_position_embeddings": 512}, shapes) == (32, 64)
    assert memory_shape({"max_position_embeddings": 32}, shapes) == (4, 16)
    assert memory_shape({}, [(2, 64), (1, 128)]) == (1, 128)  # the same tokens: the longer
    assert memory_shape({"max_position_embeddings": 8}, shapes) is None


def test_variant_job_builds_scores_times_and_measures_half_precision(tmp_path, tiny_tokenizer):
    # the teacher 128 wide (1.6 MB of fp32 weights: a peak above the resident set's resolution), s0 32 wide (35 kB)
    models = {name: save_student(make_tiny_bert(layers, seed=seed, **wide), tiny_tokenizer, tmp_path / name, TASK, {"method": "kd"})
              for name, layers, seed, wide in (("teacher", 2, 0, {"hidden_size": 128, "intermediate_size": 512}), ("s0", 1, 1, {}))}
    job = VariantJob(
        models={name: str(folder) for name, folder in models.items()}, runtimes=["torch", "torch-fp16", "torch-bf16"],
        shapes=[(1, 16), (4, 16)], out=str(tmp_path / "variants"), threads=1,
        dev=DevRows(TINY_TEXTS, None, [1, 0, 1, 0, 1, 0, 0, 1], ["accuracy"], "accuracy", False, 16),
        interleave=InterleaveSettings(warmup=1, min_rounds=3, min_seconds=0.01, max_seconds=0.5).model_dump(),
    )
    lines: list[str] = []
    outcome = run_variant_job(job, lines.append)
    facts = {(f.trial_id, f.runtime): asdict(f) for f in outcome.facts}
    assert set(facts) == {(m, rt) for m in models for rt in job.runtimes}
    for (model, runtime), fact in facts.items():
        assert fact["error"] is None and fact["metric"] is not None, fact
        # measured 2.2-4.4 MB for the teacher's variants, 0.09-2.7 MB for s0's (below the resolution: may read 0)
        if PEAK_RESETS:
            assert fact["peak_memory_bytes"] is not None and fact["peak_memory_bytes"] > (1e6 if model == "teacher" else -1)
        assert fact["path"] == str(models[model])
        if runtime != "torch":
            assert 0 < fact["parity_max_abs_diff"] <= TOLERANCES[runtime]  # random heads: logits within ±1
            assert fact["size_bytes"] == (facts[model, "torch"]["size_bytes"] - _header(models[model])) / 2
    assert not (tmp_path / "variants").exists()  # nothing to write for eager variants
    timed = outcome.measurements["4x16"].timings
    assert {"teacher/torch-fp16", "teacher/torch-bf16", "s0/torch-fp16", "s0/torch-bf16"} <= set(timed)
    (memory,) = [line for line in lines if line.startswith("variants: peak memory")]
    assert memory.startswith("variants: peak memory (resident set): teacher/torch ") and "@4x16" in memory
