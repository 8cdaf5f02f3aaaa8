"""Latency that holds on a busy machine: every model timed interleaved, speedups taken within a round.

Why: the eager measurement (`pipeline.measure.latency.time_alone`, this engine with one runner)
times one model alone until its median settles, and
the select stage times the models one after another. A machine's load changes from one minute to
the next, so each model gets its own momentary load: one select stage timed three students of the
same architecture (40,258 parameters each, the smoke sweep, under load) at 7.81, 9.03 and
13.14 ms p50, and the champion was chosen between them by that noise (issue #22, item 3). A
benchmark harness does it differently, and so does this module:

- **interleaved rounds** (`measure_interleaved`): every runner (one model in one runtime at one
  shape, the teacher included) is warmed up, then runs once per round, all rounds in one process.
  Load that comes and goes hits every model of a round alike instead of whichever model happened
  to be timed then.
- **varied order**: the order within a round is a rotation of a seeded shuffle (`round_orders`),
  so each runner takes every position once per block of rounds and follows a different runner
  from block to block: no model always pays for the cache state or the clock boost another one
  leaves behind.
- **each runner warm in its own state** (`InterleaveSettings.warm_passes`): every timed pass
  follows an untimed pass of the same runner, so it finds the caches, pages and thread pools as a
  server of that one model would, not as the previous runner left them. Timed straight after
  another model, a pass pays for that model's state: the quickstart's int8 3-layer student took
  59.4 ms at 32x64 that way and 47.7-49.4 ms warm, the eager teacher 232 ms against 215 ms
  (`benchmarks/select_load.py --warm-passes 0` and `1`, benchmarks/RESULTS.md).
- **ratios within a round** (`Speedup`): a speedup is the median over rounds of
  reference_time / runner_time, both measured in the same round under the same momentary load,
  not a ratio of two medians taken at different times. Several references may be given (the
  teacher in the same runtime, and in eager fp32: what the user runs today).
- **stop when it is settled**: after `min_rounds` and `min_seconds`, once every runner's median and
  every speedup has a ~95% interval within ±`tolerance` of itself
  (`median_is_stable`), or at `max_seconds` (then `stable` is False and
  `unsettled` names what was not). Stopping is decided between rounds only, so every runner has
  exactly one time per round.
- **intervals everywhere**: each p50 and each speedup carries the distribution-free interval of
  its median (order statistics, `median_interval`), and a latency
  difference inside those intervals never decides (`faster`, `latency_differs`, `rank`,
  `dominates`): accuracy, then size, break the tie.
- **one measurement per architecture** (`architecture_key`, `group_by_key`,
  `InterleavedResult.expand`): latency does not depend on the weights, so students whose config
  fields that determine compute are the same, in the same runtime and at the same shape, are
  timed once and every one of them gets that figure (with `measured_as` naming the one timed).
  Three seeds of one configuration then get one latency, not three draws of the noise.

Pure: no Ray, no MLflow, no torch. The caller builds the runners (binds the inputs, sets the
thread count) and passes a `synchronize` for GPUs; the clock can be injected for tests.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from pipeline.errors import DrydockError

Runner = Callable[[], object]  # one forward pass on inputs the caller bound
STABLE_TOLERANCE = 0.05  # stop once the median's ~95% interval is within ±5% of it ...
MAX_SECONDS_FACTOR = 5  # ... or after 5 × min_seconds, whichever comes first
MAX_WINDOW_SECONDS = 600.0  # a per-runner window grows with the runners, to 10 minutes a shape at most

# config.json fields that determine how much compute one forward pass does (the rest — weights'
# names, label names, dropout, the tokenizer's — do not change the time of an eval forward pass).
# BERT-family names, DistilBERT's and ALBERT's own names, and CoFi's per-layer pruned shapes
# (`methods/_pruned_bert.PrunedBertConfig`: layer_heads, layer_intermediate, attention_head_size,
# pooler_size; 0 heads or 0 dims remove a sub-layer). A field a config lacks is left out.
COMPUTE_FIELDS = (
    "architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size", "position_embedding_type",
    "embedding_size", "num_hidden_groups", "inner_group_num",  # ALBERT, ELECTRA
    "dim", "n_layers", "n_heads", "hidden_dim", "activation", "sinusoidal_pos_embds",  # DistilBERT
    "attention_head_size", "layer_heads", "layer_intermediate", "pooler_size",  # CoFi's pruned BERT
    "pruned_heads",  # a stock config's record of pruned heads (layer → heads)
)


class InterleaveSettings(BaseModel):
    """How long to time. `max_seconds` None: MAX_SECONDS_FACTOR × min_seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    warmup: NonNegativeInt = 3  # calls per runner before any timing (allocator, kernel choice, lazy init)
    # untimed passes of a runner right before each of its timed passes (the module docstring): 0
    # times each pass in the state the previous runner left; the rounds' wall time includes them
    warm_passes: NonNegativeInt = 1
    min_rounds: PositiveInt = 10
    min_seconds: NonNegativeFloat = 2.0  # of rounds (their warm passes included), warm-up excluded
    max_seconds: NonNegativeFloat | None = None
    max_rounds: PositiveInt | None = None  # a cap on memory and on a clock that does not move
    tolerance: PositiveFloat = STABLE_TOLERANCE  # settled: the ~95% interval within ±tolerance of the median
    seed: int = 0  # of the round order
    # min_seconds and max_seconds per runner: the window is them × the number of runners, so each
    # runner runs about as long as `selection.latency` would time it alone (`from_latency`; with a
    # warm pass, half of that is timed: wall time is what the user budgets). A
    # fixed window shared by N runners gives each 1/N of it: the select stage's four 32x64 runners
    # of the quickstart (teacher ~0.3 s a pass) stopped at the 10-round minimum, unsettled, with
    # intervals of ±50% (benchmarks/select_load.py with the spec's 2 s, 2026-12-02).
    per_runner: bool = False
    disable_gc: bool = True  # as timeit: a collection would land on whichever runner is running

    @model_validator(mode="after")
    def _cap_after_minimum(self) -> InterleaveSettings:
        if self.max_seconds is not None and self.max_seconds < self.min_seconds:
            raise ValueError(f"max_seconds ({self.max_seconds:g}) is below min_seconds ({self.min_seconds:g})")
        if self.max_rounds is not None and self.max_rounds < self.min_rounds:
            raise ValueError(f"max_rounds ({self.max_rounds}) is below min_rounds ({self.min_rounds})")
        return self

    @property
    def cap_seconds(self) -> float:
        return self.max_seconds if self.max_seconds is not None else MAX_SECONDS_FACTOR * self.min_seconds

    def window(self, runners: int) -> tuple[float, float]:
        """(min_seconds, cap_seconds) of a measurement of `runners` runners; a per-runner window
        is held to MAX_WINDOW_SECONDS (or the single window, when that is longer)."""
        if not self.per_runner:
            return self.min_seconds, self.cap_seconds
        scale, limit = max(1, runners), max(self.cap_seconds, MAX_WINDOW_SECONDS)
        return min(self.min_seconds * scale, limit), min(self.cap_seconds * scale, limit)

    @classmethod
    def from_latency(cls, latency: Any, **overrides: Any) -> InterleaveSettings:
        """From `selection.latency` (a `pipeline.config.LatencyConfig`): its warmup, min_runs as
        min_rounds, min_seconds."""
        values = {"warmup": latency.warmup, "min_rounds": latency.min_runs, "min_seconds": latency.min_seconds,
                  "per_runner": True}
        return cls(**{**values, **overrides})


@dataclass(frozen=True)
class Interval:
    """A ~95% interval of a median (ms for a latency, a ratio for a speedup)."""

    low: float
    high: float

    def overlaps(self, other: Interval) -> bool:
        return not (self.high < other.low or other.high < self.low)


class RunnerTiming(BaseModel):
    """One runner's times over the rounds, in ms."""

    model_config = ConfigDict(frozen=True)

    p50_ms: float
    p90_ms: float
    mean_ms: float
    low_ms: float  # the ~95% interval of the p50 (`median_interval`)
    high_ms: float
    rounds: int
    warmup: int
    measured_as: str | None = None  # the runner actually timed, for a member of its group (`expand`)

    @property
    def interval(self) -> Interval:
        return Interval(self.low_ms, self.high_ms)

    @classmethod
    def of(cls, times: Sequence[float], warmup: int) -> RunnerTiming:
        low, high = median_interval(list(times))
        return cls(p50_ms=float(np.median(times)), p90_ms=float(np.percentile(times, 90)), mean_ms=float(np.mean(times)),
                   low_ms=float(low), high_ms=float(high), rounds=len(times), warmup=warmup)


class Speedup(BaseModel):
    """reference_time / runner_time, taken within each round: the median over rounds and its interval."""

    model_config = ConfigDict(frozen=True)

    median: float
    low: float
    high: float
    rounds: int

    @property
    def interval(self) -> Interval:
        return Interval(self.low, self.high)

    @classmethod
    def of(cls, ratios: Sequence[float]) -> Speedup:
        low, high = median_interval(list(ratios))
        return cls(median=float(np.median(ratios)), low=float(low), high=float(high), rounds=len(ratios))


class InterleavedResult(BaseModel):
    """What `measure_interleaved` returns; JSON-ready (`model_dump_json`) for latency.json."""

    model_config = ConfigDict(frozen=True)

    settings: InterleaveSettings
    references: list[str]
    timings: dict[str, RunnerTiming]  # by runner name
    speedups: dict[str, dict[str, Speedup]]  # runner → reference → its speedup (a reference's over itself is 1)
    rounds: int
    seconds: float  # of rounds (warm passes included), warm-up excluded
    stable: bool  # False: stopped at max_seconds (or max_rounds) with `unsettled` not settled
    unsettled: list[str] = []  # runner names and `runner/reference` pairs
    errors: dict[str, str] = {}  # runner → why it was dropped (it raised); its times are discarded
    round_times_ms: dict[str, list[float]] = Field(default_factory=dict)  # by runner, one per round, in round order

    def expand(self, groups: Mapping[str, Sequence[str]], references: Sequence[str] | None = None) -> InterleavedResult:
        """The result for every member of the groups (`group_by_key`: representative → members),
        each with its representative's timing (`measured_as` set for the others) and speedups.
        `references`: the names the speedups are keyed by (default: this result's references);
        each must be a member of a timed reference's group. Members of a group whose representative
        failed get its error; the per-round times stay keyed by the runners timed."""
        rep_of = {member: rep for rep, members in groups.items() for member in members}
        rep_of.update({name: name for name in self.timings if name not in rep_of})
        wanted = list(self.references if references is None else references)
        for ref in wanted:
            if rep_of.get(ref) not in self.references:
                raise ValueError(f"{ref}: not a reference of this measurement, nor in the group of one")
        timings: dict[str, RunnerTiming] = {}
        speedups: dict[str, dict[str, Speedup]] = {}
        errors = dict(self.errors)
        for member, rep in rep_of.items():
            if rep not in self.timings:
                if rep in self.errors and member != rep:
                    errors[member] = f"measured as {rep}, which failed: {self.errors[rep]}"
                continue
            timings[member] = self.timings[rep].model_copy(update={"measured_as": None if member == rep else rep})
            speedups[member] = {ref: self.speedups[rep][rep_of[ref]] for ref in wanted}
        return self.model_copy(update={"references": wanted, "timings": timings, "speedups": speedups, "errors": errors})


def median_interval(times: list[float]) -> tuple[float, float]:
    """A distribution-free ~95% interval of the median: the order statistics n/2 ∓ 0.98·√n."""
    ordered = sorted(times)
    n = len(ordered)
    low = max(0, math.floor(n / 2 - 0.98 * math.sqrt(n)))
    high = min(n - 1, math.ceil(n / 2 + 0.98 * math.sqrt(n)))
    return ordered[low], ordered[high]


def median_is_stable(times: list[float], tolerance: float = STABLE_TOLERANCE) -> bool:
    if len(times) < 3:
        return False
    low, high = median_interval(times)
    return high - low <= 2 * tolerance * float(np.median(times))


# ----------------------------------------------------------------------------------------------
# the harness
# ----------------------------------------------------------------------------------------------


def round_orders(names: Sequence[str], seed: int = 0) -> Iterator[list[str]]:
    """The order of each round, forever: blocks of len(names) rounds, each block the rotations of
    a fresh seeded shuffle. Within a block every runner takes every position once; across blocks
    the runner before it changes (a plain rotation would keep it the same every round)."""
    rng = random.Random(seed)
    names = list(names)
    while True:
        block = rng.sample(names, len(names))
        for shift in range(max(1, len(block))):
            yield block[shift:] + block[:shift]


def _ratio(reference_ms: float, runner_ms: float) -> float:
    if runner_ms > 0:
        return reference_ms / runner_ms
    return 1.0 if reference_ms <= 0 else math.inf  # a clock too coarse to see either


def _unsettled(times: Mapping[str, list[float]], references: Sequence[str], tolerance: float) -> list[str]:
    out = [name for name, t in times.items() if not median_is_stable(t, tolerance)]
    for name, t in times.items():
        for ref in references:
            if ref != name and ref in times:
                ratios = [_ratio(r, x) for r, x in zip(times[ref], t)]
                if not median_is_stable(ratios, tolerance):
                    out.append(f"{name}/{ref}")
    return out


def measure_interleaved(
    runners: Mapping[str, Runner],
    references: Sequence[str] | str = (),
    settings: InterleaveSettings | None = None,
    *,
    synchronize: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    log: Callable[[str], None] | None = None,
    drop_failures: bool = True,
) -> InterleavedResult:
    """Time every runner interleaved (the module docstring says why) and the speedup of each over
    each reference. `runners`: name → a zero-argument callable running one forward pass on inputs
    it holds; `synchronize`: called after each pass, so a GPU's queued kernels are timed with the
    pass that launched them; `clock`: seconds. A runner that raises is dropped with its times and
    recorded in `errors` (the others go on, as a broken student does in a sweep); a DrydockError (a user
    mistake), or any error with `drop_failures=False` (a model timed alone: its caller tells OOM by type), stops all."""
    settings = settings or InterleaveSettings()
    refs = [references] if isinstance(references, str) else list(references)
    for ref in refs:
        if ref not in runners:
            raise ValueError(f"reference {ref!r} is not one of the runners ({', '.join(runners)})")
    sync = synchronize or (lambda: None)
    active = dict(runners)
    errors: dict[str, str] = {}

    def call(name: str, warm: int = 0) -> float | None:
        """One timed pass (ms) after `warm` untimed ones, or None when the runner raised (and is dropped)."""
        try:
            for _ in range(warm):
                active[name]()
                sync()
            t0 = clock()
            active[name]()
            sync()  # a GPU call returns before its kernels finish: time the work, not the launch
            return (clock() - t0) * 1000.0
        except Exception as e:  # noqa: BLE001 — a broken runner must not hide the others' figures
            if isinstance(e, DrydockError) or not drop_failures:
                raise
            errors[name] = f"{type(e).__name__}: {e}"[:500]
            del active[name]
            if log is not None:
                log(f"latency: {name}: dropped ({errors[name]})")
            return None

    gc_was_enabled = gc.isenabled()
    if settings.disable_gc:
        gc.disable()
    try:
        for name in list(active):
            for _ in range(settings.warmup):
                if call(name) is None:
                    break
        times: dict[str, list[float]] = {name: [] for name in active}
        min_seconds, cap_seconds = settings.window(len(active))
        orders = round_orders(list(active), settings.seed)
        started = clock()
        rounds, next_check, elapsed = 0, 0, 0.0
        unsettled: list[str] = []
        while active:
            for name in next(orders):
                if name in active and (ms := call(name, settings.warm_passes)) is not None:
                    times[name].append(ms)
            rounds += 1
            for name in [n for n in times if n not in active]:
                del times[name]  # dropped this round: its times are not aligned with the others'
            elapsed = clock() - started
            if rounds < settings.min_rounds:
                continue
            if elapsed >= cap_seconds or (settings.max_rounds is not None and rounds >= settings.max_rounds):
                unsettled = _unsettled(times, refs, settings.tolerance)
                break
            if elapsed >= min_seconds and rounds >= next_check:
                unsettled = _unsettled(times, refs, settings.tolerance)
                if not unsettled:
                    break
                next_check = rounds + max(1, rounds // 8)  # checking sorts every series: not after every round
    finally:
        if settings.disable_gc and gc_was_enabled:
            gc.enable()
    return _result(settings, refs, times, rounds, elapsed, unsettled, errors, log)


def _result(settings: InterleaveSettings, refs: list[str], times: dict[str, list[float]], rounds: int, elapsed: float,
            unsettled: list[str], errors: dict[str, str], log: Callable[[str], None] | None) -> InterleavedResult:
    """The figures of aligned per-round times: each runner's order statistics, and each speedup
    as the median of its within-round ratios."""
    timings = {name: RunnerTiming.of(t, settings.warmup) for name, t in times.items()}
    live_refs = [ref for ref in refs if ref in times]
    speedups = {name: {ref: Speedup.of([_ratio(r, x) for r, x in zip(times[ref], t)]) for ref in live_refs}
                for name, t in times.items()}
    if log is not None:
        state = "settled" if not unsettled else f"not settled: {', '.join(unsettled)}"
        log(f"latency: {len(times)} runner(s) interleaved, {rounds} rounds in {elapsed:.1f} s ({state})")
    return InterleavedResult(
        settings=settings, references=live_refs, timings=timings, speedups=speedups, rounds=rounds if times else 0,
        seconds=elapsed, stable=bool(times) and not unsettled, unsettled=unsettled, errors=errors, round_times_ms=times,
    )


# ----------------------------------------------------------------------------------------------
# one measurement per architecture
# ----------------------------------------------------------------------------------------------


def _canonical(value: Any) -> Any:
    """JSON-stable: mapping keys as sorted strings (`pruned_heads` has int keys in memory and
    string keys in config.json), tuples as lists."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def compute_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a config dict (config.json) that determine one forward pass's compute."""
    fields = {k: _canonical(config[k]) for k in COMPUTE_FIELDS if config.get(k) is not None}
    if "pruned_heads" in fields:
        fields["pruned_heads"] = {k: sorted(v) for k, v in fields["pruned_heads"].items() if v}
        if not fields["pruned_heads"]:
            del fields["pruned_heads"]
    labels = config.get("id2label")
    num_labels = len(labels) if isinstance(labels, Mapping) else config.get("num_labels")
    if num_labels is not None:
        fields["num_labels"] = num_labels  # the classifier's width
    dtype = config.get("dtype") or config.get("torch_dtype")  # transformers 5 loads a checkpoint in its dtype
    if dtype is not None:
        fields["dtype"] = str(dtype)
    return fields


def architecture_key(config: Mapping[str, Any], runtime: str, shape: Sequence[int] | Mapping[str, int]) -> str:
    """A key equal for two models exactly when one timing serves both: the same compute fields
    (`compute_fields`), runtime ("torch", "onnxruntime-int8", ...) and input shape
    ((batch, seq_length)). A hex digest; weights never enter it."""
    payload = {"config": compute_fields(config), "runtime": runtime, "shape": _canonical(shape)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def group_by_key(keys: Mapping[str, str], prefer: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
    """name → key, grouped: representative → its group's members (representative first, then in
    input order), groups in order of first appearance. The representative is the first name of
    `prefer` in the group (pass the references, so a student that shares the teacher's
    architecture is served by the teacher's timing), else the group's first name. Time the
    representatives only, then `InterleavedResult.expand(groups)`."""
    by_key: dict[str, list[str]] = {}
    for name, key in keys.items():
        by_key.setdefault(key, []).append(name)
    preferred = [name for name in prefer if name in keys]
    out: dict[str, tuple[str, ...]] = {}
    for members in by_key.values():
        rep = next((name for name in preferred if name in members), members[0])
        out[rep] = (rep, *(m for m in members if m != rep))
    return out


# ----------------------------------------------------------------------------------------------
# the tie rule: a latency difference inside the intervals never decides
# ----------------------------------------------------------------------------------------------


def _interval(x: Interval | RunnerTiming | Speedup) -> Interval:
    return x if isinstance(x, Interval) else x.interval


def faster(a: Interval | RunnerTiming, b: Interval | RunnerTiming) -> bool:
    """a is faster than b: a's whole latency interval lies below b's."""
    return _interval(a).high < _interval(b).low


def latency_differs(a: Interval | RunnerTiming, b: Interval | RunnerTiming) -> bool:
    """The intervals separate: one of the two is faster. Otherwise the measurement cannot tell them apart."""
    return not _interval(a).overlaps(_interval(b))


@dataclass(frozen=True)
class Candidate:
    """What the front and the champion compare: a metric (higher is better), a latency interval
    (ms) and a size (bytes or parameters, smaller is better)."""

    name: str
    metric: float
    latency: Interval
    size: float


def rank(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Faster first where latencies separate; accuracy, then size, where they do not.

    Overlap is not transitive (a ~ b, b ~ c, a faster than c), so candidates are first cut into
    tiers: sorted by interval, a new tier starts where an interval lies wholly above every
    interval before it. Every candidate of a tier is faster than every one of the next tier;
    within a tier the latency does not decide: metric (descending), size, then name."""
    ordered = sorted(candidates, key=lambda c: (c.latency.low, c.latency.high, c.name))
    tiers: list[list[Candidate]] = []
    top = -math.inf
    for c in ordered:
        if not tiers or c.latency.low > top:
            tiers.append([])
        tiers[-1].append(c)
        top = max(top, c.latency.high)
    return [c for tier in tiers for c in sorted(tier, key=lambda c: (-c.metric, c.size, c.name))]


def dominates(a: Candidate, b: Candidate, *, size: bool = False, size_breaks_ties: bool = False) -> bool:
    """a dominates b on the front (metric ↑, latency ↓[, size ↓]) where latency counts only when
    the intervals separate: a is no worse on every objective and better on one. The one dominance
    rule of the tree (`pipeline.select.front`). `size_breaks_ties` (without `size`): an exact
    metric tie within the noise goes to the smaller too — the pairwise form of the front's tie
    rule (`pipeline.select.front.front_mask` applies it after this rule, so it never runs in a
    circle)."""
    no_worse = a.metric >= b.metric and not faster(b.latency, a.latency) and (not size or a.size <= b.size)
    better = a.metric > b.metric or faster(a.latency, b.latency) or (size and a.size < b.size)
    if no_worse and better:
        return True
    return (size_breaks_ties and not size and a.metric == b.metric and not latency_differs(a.latency, b.latency)
            and a.size < b.size)
