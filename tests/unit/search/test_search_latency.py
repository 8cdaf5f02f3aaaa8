"""Search-time latency: students of one architecture are timed once, whatever their weights."""

from __future__ import annotations

import json

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
