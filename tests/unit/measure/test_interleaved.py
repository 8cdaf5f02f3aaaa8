"""The interleaved latency harness on fake runners: a fake clock that each runner advances by a
known amount (exact figures, no waiting), and two real busy-waits of known length; the dedupe of
architectures on config dicts; the tie rule on hand-made intervals."""

from __future__ import annotations

import gc
import itertools
import json
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from pipeline.config import LatencyConfig
from pipeline.measure.interleaved import (
    MAX_SECONDS_FACTOR,
    Candidate,
    InterleavedResult,
    InterleaveSettings,
    Interval,
    RunnerTiming,
    architecture_key,
    dominates,
    faster,
    group_by_key,
    latency_differs,
    measure_interleaved,
    median_is_stable,
    rank,
    round_orders,
)

UNIT = 1 / 1024  # seconds: sums of multiples stay exact in binary, so stopping points are exact


class FakeClock:
    """Seconds that pass only when a fake runner says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_runner(clock: FakeClock, seconds: Callable[[int], float], calls: list[str] | None = None, name: str = "") -> Callable[[], None]:
    """A runner whose k-th call (warm-up included) takes `seconds(k)` on the fake clock."""
    counter = itertools.count()

    def run() -> None:
        if calls is not None:
            calls.append(name)
        clock.now += seconds(next(counter))

    return run


def busy_runner(ms: float, factor: Callable[[int], float] = lambda k: 1.0) -> Callable[[], None]:
    """A runner that spins for ms × factor(k) of real time on its k-th call."""
    counter = itertools.count()

    def run() -> None:
        deadline = time.perf_counter() + ms * factor(next(counter)) / 1000.0
        while time.perf_counter() < deadline:
            pass

    return run


def settings(**kw) -> InterleaveSettings:
    """No warm passes unless a test asks: most tests count calls and seconds of timed passes alone
    (the warm passes have their own tests)."""
    return InterleaveSettings(**{"warmup": 2, "min_rounds": 5, "min_seconds": 0.0, "max_seconds": 10.0, "warm_passes": 0, **kw})


# ----------------------------------------------------------------------------------------------
# the figures
# ----------------------------------------------------------------------------------------------


def test_fake_clock_gives_exact_figures_and_round_trips_through_json():
    clock = FakeClock()
    runners = {"a": fake_runner(clock, lambda k: 2 * UNIT), "b": fake_runner(clock, lambda k: 4 * UNIT)}
    result = measure_interleaved(runners, "b", settings(), clock=clock)

    assert result.stable and result.unsettled == [] and result.rounds == 5  # settled at the minimum
    a, b = result.timings["a"], result.timings["b"]
    assert a.p50_ms == a.p90_ms == a.mean_ms == a.low_ms == a.high_ms == pytest.approx(2000 * UNIT)
    assert b.p50_ms == pytest.approx(4000 * UNIT) and a.rounds == b.rounds == 5 and a.warmup == 2
    assert result.speedups["a"]["b"].median == result.speedups["a"]["b"].low == result.speedups["a"]["b"].high == 2.0
    assert result.speedups["b"]["b"].median == 1.0  # a reference over itself
    assert result.seconds == pytest.approx(5 * 6 * UNIT)  # rounds only: the warm-up is not counted
    assert [len(t) for t in result.round_times_ms.values()] == [5, 5]
    assert InterleavedResult.model_validate_json(result.model_dump_json()) == result
    json.loads(result.model_dump_json())  # plain JSON for latency.json


def test_busy_waits_of_2_and_4_ms_give_a_speedup_of_2():
    result = measure_interleaved({"a": busy_runner(2.0), "b": busy_runner(4.0)}, references=("b",),
                                 settings=settings(min_rounds=15, min_seconds=0.1, max_seconds=1.0))
    assert 1.8 <= result.speedups["a"]["b"].median <= 2.2
    s = result.speedups["a"]["b"]
    assert s.low <= s.median <= s.high
    assert result.timings["a"].p50_ms == pytest.approx(2.0, rel=0.1)


def test_load_that_hits_every_runner_of_a_round_leaves_the_ratio_exact():
    # A busy machine: in some rounds everything runs 3 to 8 times slower. Each runner's own
    # figures swing with it; the within-round ratio does not move.
    load = [1, 8, 1, 3, 1, 1, 5, 1, 8, 2, 1, 6]
    warmup = 2

    def timed(base: float) -> Callable[[int], float]:
        return lambda k: base * (load[(k - warmup) % len(load)] if k >= warmup else 1)

    clock = FakeClock()
    runners = {"student": fake_runner(clock, timed(2 * UNIT)), "teacher": fake_runner(clock, timed(6 * UNIT))}
    result = measure_interleaved(runners, "teacher", settings(warmup=warmup, min_rounds=24, max_rounds=24), clock=clock)

    student = result.timings["student"]
    assert student.p90_ms > 3 * student.p50_ms  # the load is visible in the runner's own figures
    assert result.speedups["student"]["teacher"].median == 3.0
    assert result.speedups["student"]["teacher"].interval == Interval(3.0, 3.0)


def test_load_on_real_busy_waits_still_gives_the_ratio():
    load = {3: 4.0, 4: 4.0, 9: 3.0, 12: 5.0, 13: 5.0, 17: 4.0}  # call index → slowdown of that round
    factor = lambda k: load.get(k, 1.0)
    result = measure_interleaved({"a": busy_runner(1.0, factor), "b": busy_runner(2.0, factor)}, "b",
                                 settings(warmup=1, min_rounds=20, max_rounds=20))
    assert result.rounds == 20
    assert 1.8 <= result.speedups["a"]["b"].median <= 2.2


def cache_runners(clock: FakeClock, calls: list[str], cold: float, warm: dict[str, float]) -> dict[str, Callable[[], None]]:
    """Runners that take `cold` seconds when another runner ran last (its state in the caches)
    and their own `warm[name]` when they ran last themselves."""

    def runner(name: str) -> Callable[[], None]:
        def run() -> None:
            clock.now += warm[name] if calls and calls[-1] == name else cold
            calls.append(name)

        return run

    return {name: runner(name) for name in warm}


def test_each_timed_pass_follows_an_untimed_pass_of_the_same_runner():
    clock, calls = FakeClock(), []
    runners = cache_runners(clock, calls, cold=20 * UNIT, warm={"student": 2 * UNIT, "teacher": 4 * UNIT})
    result = measure_interleaved(runners, "teacher", settings(warmup=1, min_rounds=6, max_rounds=6, warm_passes=1), clock=clock)

    rounds = calls[2:]  # after one warm-up call each
    assert len(rounds) == 2 * 2 * 6 and all(rounds[i] == rounds[i + 1] for i in range(0, len(rounds), 2))
    assert result.timings["student"].p50_ms == result.timings["student"].p90_ms == pytest.approx(2000 * UNIT)
    assert result.timings["teacher"].p50_ms == pytest.approx(4000 * UNIT)
    assert result.speedups["student"]["teacher"].interval == Interval(2.0, 2.0)
    own = {"student": 2, "teacher": 4}
    wall = sum(own[c] if calls[i - 1] == c else 20 for i, c in enumerate(calls) if i >= 2)
    assert result.seconds == pytest.approx(wall * UNIT) and wall > 2 * 6 * (2 + 4)  # the warm passes take wall time too


def test_without_warm_passes_a_runner_is_timed_in_the_state_the_previous_one_left():
    clock, calls = FakeClock(), []
    runners = cache_runners(clock, calls, cold=20 * UNIT, warm={"student": 2 * UNIT, "teacher": 4 * UNIT})
    result = measure_interleaved(runners, "teacher", settings(warmup=1, min_rounds=6, max_rounds=6, warm_passes=0), clock=clock)
    # the order rotates, so a runner sometimes follows itself across rounds: those passes are warm
    after = [calls[i - 1] for i in range(2, len(calls)) if calls[i] == "student"]  # after one warm-up call each
    assert [round(ms / (1000 * UNIT)) for ms in result.round_times_ms["student"]] == [2 if c == "student" else 20 for c in after]
    assert {2, 20} <= {round(ms / (1000 * UNIT)) for ms in result.round_times_ms["student"]}


def test_warm_passes_are_synchronized_like_timed_ones():
    clock = FakeClock()
    synced: list[float] = []
    result = measure_interleaved({"a": fake_runner(clock, lambda k: UNIT), "b": fake_runner(clock, lambda k: UNIT)}, "a",
                                 settings(warmup=1, warm_passes=2), synchronize=lambda: synced.append(clock.now), clock=clock)
    assert len(synced) == 2 * (1 + 3 * result.rounds)  # a GPU pass's queued kernels never spill into the timed one


# ----------------------------------------------------------------------------------------------
# the order of the rounds
# ----------------------------------------------------------------------------------------------


def test_round_order_rotates_and_varies_what_comes_before_each_runner():
    clock = FakeClock()
    calls: list[str] = []
    names = ["a", "b", "c", "d"]
    runners = {n: fake_runner(clock, lambda k: UNIT, calls, n) for n in names}
    result = measure_interleaved(runners, "a", settings(warmup=1, min_rounds=16, max_rounds=16), clock=clock)

    assert calls[:4] == names  # warm-up, in order
    rounds = [calls[4 + 4 * i: 8 + 4 * i] for i in range(result.rounds)]
    assert result.rounds == 16 and all(sorted(r) == names for r in rounds)
    for block in range(4):  # within a block of 4 rounds, every runner takes every position once
        for position in range(4):
            assert sorted(r[position] for r in rounds[4 * block: 4 * block + 4]) == names
    assert len({tuple(r) for r in rounds}) > 4  # not one rotation repeated
    for name in names:  # nobody always follows the same runner
        before = {r[r.index(name) - 1] for r in rounds if r.index(name) > 0}
        assert len(before) > 1, name


def test_round_orders_are_seeded():
    take = lambda seed: list(itertools.islice(round_orders(["a", "b", "c"], seed), 12))
    assert take(1) == take(1) and take(1) != take(2)
    assert list(itertools.islice(round_orders(["x"]), 3)) == [["x"]] * 3


# ----------------------------------------------------------------------------------------------
# when to stop
# ----------------------------------------------------------------------------------------------


def test_min_rounds_and_min_seconds_are_respected():
    clock = FakeClock()
    runners = {"a": fake_runner(clock, lambda k: UNIT), "b": fake_runner(clock, lambda k: 2 * UNIT)}
    assert measure_interleaved(runners, "b", settings(min_rounds=7), clock=clock).rounds == 7
    # 3 units a round, 30 units at least: exactly 10 rounds
    result = measure_interleaved(runners, "b", settings(min_rounds=3, min_seconds=30 * UNIT), clock=clock)
    assert result.rounds == 10 and result.stable


def test_a_per_runner_window_grows_with_the_runners():
    clock = FakeClock()
    runners = {n: fake_runner(clock, lambda k: UNIT) for n in "abc"}
    # 3 units a round; 10 units per runner: 30 units, 10 rounds (a shared window would stop at 4)
    result = measure_interleaved(runners, "a", settings(min_rounds=3, min_seconds=10 * UNIT, per_runner=True), clock=clock)
    assert result.rounds == 10
    assert measure_interleaved(runners, "a", settings(min_rounds=3, min_seconds=10 * UNIT), clock=clock).rounds == 4
    noisy = [1, 8, 2, 4]
    runners["b"] = fake_runner(clock, lambda k: noisy[k % 4] * UNIT)  # never settles: the cap ends it, 3 × 0.5 s
    capped = measure_interleaved(runners, "a", settings(min_seconds=0.1, max_seconds=0.5, per_runner=True), clock=clock)
    assert not capped.stable and 1.5 <= capped.seconds < 1.5 + 0.02
    latency = SimpleNamespace(warmup=1, min_runs=10, min_seconds=2.0)
    assert InterleaveSettings.from_latency(latency).per_runner and InterleaveSettings.from_latency(latency).window(4) == (8.0, 40.0)
    assert InterleaveSettings.from_latency(latency).window(100) == (200.0, 600.0)  # held to 10 minutes a shape
    assert InterleaveSettings.from_latency(latency).window(1000) == (600.0, 600.0)


def test_max_seconds_caps_a_runner_that_never_settles():
    clock = FakeClock()
    noisy = [1, 8, 2, 4]  # the median's interval spans 2 to 4 units however many rounds there are
    runners = {"quiet": fake_runner(clock, lambda k: UNIT), "noisy": fake_runner(clock, lambda k: noisy[k % 4] * UNIT)}
    result = measure_interleaved(runners, "quiet", settings(min_seconds=0.1, max_seconds=0.5), clock=clock)

    assert not result.stable
    assert "noisy" in result.unsettled and "noisy/quiet" in result.unsettled and "quiet" not in result.unsettled
    assert result.seconds >= 0.5
    last_round = (result.round_times_ms["quiet"][-1] + result.round_times_ms["noisy"][-1]) / 1000
    assert result.seconds - last_round < 0.5  # the first round boundary past the cap


def test_an_unsettled_speedup_keeps_sampling_after_the_medians_settle():
    # Each runner's times stay within ±5% of its median, but one is slow exactly when the other
    # is fast: the ratio swings by ±10% and needs more rounds to settle.
    values = [1.0 + 0.01 * ((7 * k) % 11) for k in range(11)]
    clock = FakeClock()
    runners = {"x": fake_runner(clock, lambda k: values[k % 11] * UNIT),
               "ref": fake_runner(clock, lambda k: (2.1 - values[k % 11]) * UNIT)}
    result = measure_interleaved(runners, "ref", settings(warmup=0, min_rounds=5), clock=clock)

    first = {name: t[:5] for name, t in result.round_times_ms.items()}
    assert all(median_is_stable(t) for t in first.values())  # the medians alone would have stopped at 5
    assert result.rounds > 5 and result.stable
    s = result.speedups["x"]["ref"]
    assert s.high - s.low <= 2 * 0.05 * s.median


def test_settings():
    assert InterleaveSettings(min_seconds=1.5).cap_seconds == MAX_SECONDS_FACTOR * 1.5
    assert InterleaveSettings(min_seconds=1.0, max_seconds=2.0).cap_seconds == 2.0
    with pytest.raises(ValueError, match="max_seconds"):
        InterleaveSettings(min_seconds=2.0, max_seconds=1.0)
    with pytest.raises(ValueError, match="max_rounds"):
        InterleaveSettings(min_rounds=10, max_rounds=5)
    from_spec = InterleaveSettings.from_latency(LatencyConfig(warmup=4, min_runs=12, min_seconds=3.0), seed=7)
    assert (from_spec.warmup, from_spec.min_rounds, from_spec.min_seconds, from_spec.seed) == (4, 12, 3.0, 7)
    assert InterleaveSettings().warm_passes == from_spec.warm_passes == 1


# ----------------------------------------------------------------------------------------------
# the calls around the timing
# ----------------------------------------------------------------------------------------------


def test_synchronize_after_every_pass_and_gc_off_while_timing():
    clock = FakeClock()
    synced: list[float] = []
    gc_during: list[bool] = []

    def run() -> None:
        gc_during.append(gc.isenabled())
        clock.now += UNIT

    assert gc.isenabled()
    result = measure_interleaved({"a": run, "b": fake_runner(clock, lambda k: UNIT)}, "a", settings(warmup=3),
                                 synchronize=lambda: synced.append(clock.now), clock=clock)
    assert len(synced) == 2 * (3 + result.rounds)
    assert not any(gc_during) and gc.isenabled()


def test_a_runner_that_raises_is_dropped_and_the_others_go_on():
    clock = FakeClock()
    counter = itertools.count()

    def broken() -> None:
        if next(counter) == 4:  # the third timed round
            raise RuntimeError("out of memory")
        clock.now += UNIT

    runners = {"a": fake_runner(clock, lambda k: UNIT), "broken": broken, "b": fake_runner(clock, lambda k: 2 * UNIT)}
    logged: list[str] = []
    result = measure_interleaved(runners, "b", settings(), clock=clock, log=logged.append)
    assert result.errors == {"broken": "RuntimeError: out of memory"}
    assert set(result.timings) == set(result.round_times_ms) == {"a", "b"}
    assert result.timings["a"].rounds == result.rounds == len(result.round_times_ms["b"])
    assert any("broken: dropped" in line for line in logged)


def test_a_runner_that_raises_in_a_warm_pass_is_dropped_like_in_a_timed_one():
    clock = FakeClock()
    counter = itertools.count()

    def broken() -> None:
        if next(counter) == 4:  # warm-up 2 calls, then warm pass 2, timed 3, warm pass 4
            raise RuntimeError("out of memory")
        clock.now += UNIT

    runners = {"a": fake_runner(clock, lambda k: UNIT), "broken": broken}
    result = measure_interleaved(runners, "a", settings(warm_passes=1), clock=clock)
    assert result.errors == {"broken": "RuntimeError: out of memory"}
    assert set(result.round_times_ms) == {"a"} and result.timings["a"].rounds == result.rounds


def test_references_must_be_runners():
    with pytest.raises(ValueError, match="teacher"):
        measure_interleaved({"a": lambda: None}, "teacher")


# ----------------------------------------------------------------------------------------------
# one measurement per architecture
# ----------------------------------------------------------------------------------------------


def bert_config(**kw) -> dict:
    """A config.json as `save_pretrained` writes it for a BERT student."""
    return {"architectures": ["BertForSequenceClassification"], "model_type": "bert", "vocab_size": 30522, "hidden_size": 384,
            "num_hidden_layers": 3, "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
            "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_dropout_prob": 0.1, "dtype": "float32",
            "id2label": {"0": "negative", "1": "positive"}, "_name_or_path": "/students/kd-s0", "transformers_version": "5.0.0",
            **kw}


def cofi_config(layer_heads: list[int], layer_intermediate: list[int], **kw) -> dict:
    """A config.json of CoFi's export (`methods/_pruned_bert.PrunedBertConfig`, via `_surgery.pruned_config`)."""
    return {"architectures": ["PrunedBertForSequenceClassification"], "model_type": "drydock_pruned_bert",
            "auto_map": {"AutoConfig": "_pruned_bert.PrunedBertConfig"}, "vocab_size": 30522, "hidden_size": 700,
            "pooler_size": 768, "attention_head_size": 64, "layer_heads": layer_heads, "layer_intermediate": layer_intermediate,
            "num_hidden_layers": len(layer_heads), "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu",
            "id2label": {"0": "negative", "1": "positive"}, "_name_or_path": "/students/cofi-s0", **kw}


def test_architecture_key_ignores_weights_and_names_but_not_shapes():
    shape = (32, 64)
    seed0 = architecture_key(bert_config(), "torch", shape)
    seed1 = architecture_key(bert_config(_name_or_path="/students/kd-s1", hidden_dropout_prob=0.2,
                                         id2label={"0": "neg", "1": "pos"}), "torch", [32, 64])
    assert seed0 == seed1  # another seed, other weights and label names: the same compute
    assert architecture_key(bert_config(num_hidden_layers=4), "torch", shape) != seed0
    assert architecture_key(bert_config(), "onnxruntime-int8", shape) != seed0
    assert architecture_key(bert_config(), "torch", (1, 128)) != seed0
    assert architecture_key(bert_config(id2label={"0": "a", "1": "b", "2": "c"}), "torch", shape) != seed0

    cofi = architecture_key(cofi_config([12, 8, 0], [1536, 900, 300]), "torch", shape)
    assert cofi == architecture_key(cofi_config([12, 8, 0], [1536, 900, 300], _name_or_path="/students/cofi-s1"), "torch", shape)
    assert architecture_key(cofi_config([12, 8, 0], [1536, 800, 300]), "torch", shape) != cofi  # pruned FFN sizes differ
    assert architecture_key(cofi_config([12, 6, 2], [1536, 900, 300]), "torch", shape) != cofi  # pruned heads differ
    # a stock config's pruned heads: int keys in memory, string keys in config.json, any order
    assert (architecture_key(bert_config(pruned_heads={0: [3, 1]}), "torch", shape)
            == architecture_key(bert_config(pruned_heads={"0": [1, 3]}), "torch", shape)
            != architecture_key(bert_config(pruned_heads={"0": [1]}), "torch", shape))
    assert architecture_key(bert_config(pruned_heads={}), "torch", shape) == seed0


def test_groups_are_timed_once_and_every_member_gets_the_figures():
    shape = (32, 64)
    teacher = bert_config(num_hidden_layers=12, hidden_size=768, intermediate_size=3072)
    configs = {"teacher@torch": (teacher, "torch"), "teacher@onnxruntime": (teacher, "onnxruntime"),
               "kd-s0": (bert_config(), "torch"), "kd-s1": (bert_config(_name_or_path="/students/kd-s1"), "torch"),
               "finetune-s0": (teacher, "torch"), "cofi-s0": (cofi_config([12, 8, 0], [1536, 900, 300]), "torch")}
    keys = {name: architecture_key(config, runtime, shape) for name, (config, runtime) in configs.items()}
    references = ("teacher@torch", "teacher@onnxruntime")
    groups = group_by_key(keys, prefer=references)
    assert groups == {"teacher@torch": ("teacher@torch", "finetune-s0"), "teacher@onnxruntime": ("teacher@onnxruntime",),
                      "kd-s0": ("kd-s0", "kd-s1"), "cofi-s0": ("cofi-s0",)}
    assert group_by_key(keys)["teacher@torch"] == ("teacher@torch", "finetune-s0")

    clock = FakeClock()
    units = {"teacher@torch": 12, "teacher@onnxruntime": 8, "kd-s0": 3, "cofi-s0": 4}
    runners = {rep: fake_runner(clock, lambda k, u=units[rep]: u * UNIT) for rep in groups}
    measured = measure_interleaved(runners, references, settings(), clock=clock)
    full = measured.expand(groups)

    assert set(full.timings) == set(configs) and set(full.round_times_ms) == set(groups)
    assert full.timings["kd-s1"].p50_ms == full.timings["kd-s0"].p50_ms and full.timings["kd-s1"].measured_as == "kd-s0"
    assert full.timings["kd-s0"].measured_as is None
    assert full.speedups["kd-s1"] == {"teacher@torch": measured.speedups["kd-s0"]["teacher@torch"],
                                      "teacher@onnxruntime": measured.speedups["kd-s0"]["teacher@onnxruntime"]}
    assert full.speedups["kd-s1"]["teacher@torch"].median == 4.0
    assert full.speedups["finetune-s0"]["teacher@torch"].median == 1.0
    assert full.speedups["teacher@onnxruntime"]["teacher@torch"].median == 1.5
    # speedups keyed by another member of a reference's group; a name in no reference's group is refused
    assert set(measured.expand(groups, references=["finetune-s0"]).speedups["kd-s1"]) == {"finetune-s0"}
    with pytest.raises(ValueError, match="kd-s1"):
        measured.expand(groups, references=["kd-s1"])


def test_members_of_a_failed_representative_get_its_error():
    clock = FakeClock()

    def broken() -> None:
        raise RuntimeError("cannot load")

    measured = measure_interleaved({"t": fake_runner(clock, lambda k: UNIT), "s0": broken}, "t", settings(), clock=clock)
    full = measured.expand({"t": ("t",), "s0": ("s0", "s1")})
    assert set(full.timings) == {"t"}
    assert full.errors["s0"] == "RuntimeError: cannot load" and "measured as s0" in full.errors["s1"]


# ----------------------------------------------------------------------------------------------
# the tie rule
# ----------------------------------------------------------------------------------------------


def timing(low: float, high: float) -> RunnerTiming:
    return RunnerTiming(p50_ms=(low + high) / 2, p90_ms=high, mean_ms=(low + high) / 2, low_ms=low, high_ms=high, rounds=20, warmup=3)


def test_faster_only_when_the_intervals_separate():
    assert faster(timing(7.5, 8.1), timing(8.5, 9.6)) and not faster(timing(8.5, 9.6), timing(7.5, 8.1))
    assert latency_differs(timing(7.5, 8.1), timing(8.5, 9.6))
    # the 7.81 / 9.03 / 13.14 ms students, with the intervals such noise has: no decision
    assert not faster(timing(7.1, 10.2), timing(8.0, 15.9)) and not latency_differs(timing(7.1, 10.2), timing(8.0, 15.9))
    assert not latency_differs(Interval(1.0, 2.0), Interval(2.0, 3.0))  # touching is not separated


def test_rank_by_metric_then_size_when_latencies_tie_and_by_latency_when_they_separate():
    a = Candidate("a", metric=0.90, latency=Interval(7.0, 10.0), size=100)
    b = Candidate("b", metric=0.92, latency=Interval(8.0, 14.0), size=100)  # slower p50, overlapping: better metric wins
    c = Candidate("c", metric=0.92, latency=Interval(9.0, 11.0), size=50)  # same metric as b, smaller
    assert [x.name for x in rank([a, b, c])] == ["c", "b", "a"]

    fast = Candidate("fast", metric=0.80, latency=Interval(2.0, 3.0), size=500)
    assert [x.name for x in rank([a, fast])] == ["fast", "a"]  # separated: the faster wins despite its metric

    # overlap is not transitive: p ~ q, q ~ r, p faster than r; one tier, decided by metric
    p = Candidate("p", 0.80, Interval(1.0, 2.0), 10)
    q = Candidate("q", 0.85, Interval(1.5, 3.5), 10)
    r = Candidate("r", 0.90, Interval(3.0, 4.0), 10)
    s = Candidate("s", 0.99, Interval(4.5, 5.0), 10)
    assert [x.name for x in rank([s, p, r, q])] == ["r", "q", "p", "s"]
    assert rank([]) == []


def test_dominates_counts_latency_only_when_separated():
    base = Candidate("base", 0.90, Interval(7.0, 10.0), 100)
    assert dominates(Candidate("better", 0.91, Interval(8.0, 12.0), 100), base)  # a slower p50 inside the interval
    assert dominates(Candidate("faster", 0.90, Interval(2.0, 3.0), 100), base)
    assert not dominates(Candidate("noise", 0.90, Interval(6.0, 7.5), 100), base)  # only faster within the noise
    assert not dominates(Candidate("fast-worse", 0.85, Interval(2.0, 3.0), 100), base)
    smaller = Candidate("smaller", 0.90, Interval(7.0, 10.0), 50)
    assert dominates(smaller, base, size=True) and not dominates(smaller, base)
