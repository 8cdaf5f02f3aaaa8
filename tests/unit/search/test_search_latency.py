"""Search-time latency: students of one architecture are timed once, whatever their weights."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.config import LatencyConfig
from pipeline.search.outcome import write_outcome
from pipeline.search.search_latency import SearchLatency, architecture
from pipeline.search.space import Trial
from pipeline.storage import WorkStore
from tests.conftest import make_tiny_bert


def _trial(method_params, cid: str) -> Trial:
    return Trial("kd", method_params, 0, cid)


def test_students_that_differ_only_in_weights_share_one_measurement_and_a_deeper_one_is_timed(tmp_path):
    from methods import get_method

    store = WorkStore.open(tmp_path)
    for cid, depth, seed in (("aaaa", 1, 0), ("bbbb", 1, 7), ("cccc", 4, 0)):
        folder = tmp_path / "trials" / f"kd-{cid}-s0"
        make_tiny_bert(num_layers=depth, seed=seed).save_pretrained(folder / "student")
        write_outcome(folder, {"status": "finished", "student_path": str(folder / "student")})
    assert architecture(tmp_path / "trials/kd-aaaa-s0/student") == architecture(tmp_path / "trials/kd-bbbb-s0/student")
    assert architecture(tmp_path / "trials/kd-aaaa-s0/student") != architecture(tmp_path / "trials/kd-cccc-s0/student")

    settings = LatencyConfig(batch_size=4, seq_length=16, shapes=["4x16"], min_runs=3, min_seconds=0.2, warmup=1)
    latency = SearchLatency(store, "trials", settings, window_s=0.1)
    params = get_method("kd").Params()
    shallow, same, deep = (latency(_trial(params, cid)) for cid in ("aaaa", "bbbb", "cccc"))
    assert len(latency.by_architecture) == 2  # the second one-layer student was not timed again
    assert shallow == same and shallow > 0 and deep > 0
    assert latency.by_configuration == {"aaaa": shallow, "bbbb": shallow, "cccc": deep}
    assert json.loads((tmp_path / "trials/kd-aaaa-s0/outcome.json").read_text())["status"] == "finished"


def test_each_architecture_is_timed_in_every_runtime_and_its_latency_is_the_fastest(tmp_path, monkeypatch):
    # the select stage's front is over (configuration, runtime): the search ranks a student by
    # its fastest variant, each runtime built and timed once per architecture, in scratch
    import pipeline.measure.engines as engines
    from methods import get_method

    built: list[tuple[str, Path]] = []
    real_build = engines.build_variant

    def counted(folder, runtime, out_dir, **kwargs):
        built.append((runtime, Path(out_dir)))
        return real_build(folder, runtime, out_dir, **kwargs)

    monkeypatch.setattr(engines, "build_variant", counted)
    store = WorkStore.open(tmp_path)
    for cid, seed in (("aaaa", 0), ("bbbb", 7)):
        folder = tmp_path / "trials" / f"kd-{cid}-s0"
        make_tiny_bert(num_layers=2, seed=seed).save_pretrained(folder / "student")
        write_outcome(folder, {"status": "finished", "student_path": str(folder / "student")})
    settings = LatencyConfig(batch_size=4, seq_length=16, shapes=["4x16"], min_runs=3, min_seconds=0.2, warmup=1, threads=1)
    latency = SearchLatency(store, "trials", settings, window_s=0.1, runtimes=["torch", "onnxruntime-int8"])
    params = get_method("kd").Params()
    first = latency(_trial(params, "aaaa"))
    shape = architecture(tmp_path / "trials/kd-aaaa-s0/student")
    eager, int8 = latency.by_runtime[(shape, "torch")], latency.by_runtime[(shape, "onnxruntime-int8")]
    assert eager > 0 and int8 > 0 and eager != int8 and first == min(eager, int8)
    assert latency.failures == {} and [runtime for runtime, _ in built] == ["torch", "onnxruntime-int8"]
    assert not any(out.exists() for _, out in built)  # the scratch ONNX files are gone once timed
    # the second student of that architecture: nothing built or timed again
    assert latency(_trial(params, "bbbb")) == first and len(latency.by_runtime) == 2 and len(built) == 2

    # a runtime that cannot be built is left out, said in failures; eager alone is never skipped
    def gave_up(folder, runtime, out_dir, **kwargs):
        if runtime != "torch":
            raise RuntimeError("exporter gave up")
        return real_build(folder, runtime, out_dir, **kwargs)

    monkeypatch.setattr(engines, "build_variant", gave_up)
    broken = SearchLatency(store, "trials", settings, window_s=0.1, runtimes=["torch", "onnxruntime-int8"])
    make_tiny_bert(num_layers=3).save_pretrained(tmp_path / "odd")
    value = broken.of_folder(tmp_path / "odd")
    odd = architecture(tmp_path / "odd")
    assert value == broken.by_runtime[(odd, "torch")] and broken.failures == {(odd, "onnxruntime-int8"): "RuntimeError: exporter gave up"}
