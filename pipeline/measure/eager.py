"""results.parquet's eager fp32 figures as a view of the variants' measurement: one timing of
each model per sweep.

When the spec asks for runtime variants (`pipeline.measure.job.variants_wanted`), the variants
job already times the teacher and every planned student in eager fp32 (the `torch` runner) at
the front's shape, interleaved with the other runtimes in one process. Timing them a second time
alone on their nodes (`pipeline.measure.latency.measure_all`) gave one model two figures: the
quickstart's kd student 184.6 ms alone and 220.6 ms interleaved in one run, and the teacher
418.5 and 479.2 ms (benchmarks/RESULTS.md, "2026-12-04: 13 m 29 s"). So with variants the
select stage reads results.parquet's `latency_ms`, `latency_p90_ms` and `speedup`, latency.json
and the trials' MLflow figures off the `torch` rows here: the speedup is the one variants.parquet
gives (the median over rounds of the within-round ratio to the teacher's `torch` runner), and a
student timed as another of its architecture says so (`measured_as`). Without variants (only
`torch`, one shape) `measure_all` stays the way: it spreads the students over nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pipeline.config import LatencyConfig, Shape
from pipeline.measure.job import TEACHER, Host, VariantOutcome, runner_name
from pipeline.measure.latency import Measurement, Timings
from pipeline.measure.runtimes import EAGER
from pipeline.prepare.model_card import parameter_count

UNKNOWN_HOST = Host(hostname="", pid=0, node_id="", device_name="unknown", torch_version="")


def _parameters(folder: Path) -> int:
    """As `measure_folder` reports it: drydock.json's or the safetensors headers' count, else the
    loaded model's (a folder of `.bin` weights; seconds, once per model)."""
    counted = parameter_count(folder)
    if counted is not None:
        return counted
    from pipeline.measure.engines import load_model

    return sum(p.numel() for p in load_model(folder).parameters())


def eager_view(outcome: VariantOutcome, students: Mapping[str, Path], teacher: Path,
               settings: LatencyConfig) -> tuple[Timings, dict[str, float]]:
    """The teacher's and each student's eager timing at the front's shape as `Measurement`s (the
    teacher keyed by the job's node, as `measure_all` keys it), why a model has none, and each
    timed student's speedup over the teacher within the rounds."""
    label = Shape(batch_size=settings.batch_size, seq_length=settings.seq_length).label
    result = outcome.measurements.get(label)
    facts = {(fact.trial_id, fact.runtime): fact for fact in outcome.facts}
    host = outcome.host or UNKNOWN_HOST
    reference = runner_name(TEACHER, EAGER)
    timings = Timings()
    speedups: dict[str, float] = {}
    for key, folder in [(TEACHER, teacher), *students.items()]:
        name = runner_name(key, EAGER)
        timing = result.timings.get(name) if result is not None else None
        if timing is None:
            fact = facts.get((key, EAGER))
            why = (fact.error if fact is not None else None) or (result.errors.get(name) if result is not None else None)
            timings.errors[key] = why or f"no eager fp32 timing at {label}"
            continue
        measured = Measurement(
            path=str(folder), p50_ms=timing.p50_ms, p90_ms=timing.p90_ms, mean_ms=timing.mean_ms,
            throughput=settings.batch_size * 1000.0 / timing.p50_ms, runs=timing.rounds, warmup=timing.warmup,
            batch_size=settings.batch_size, seq_length=settings.seq_length, device=settings.device,
            device_name=host.device_name, threads=outcome.threads, torch_version=host.torch_version,
            num_params=_parameters(Path(folder)), hostname=host.hostname, node_id=host.node_id, pid=host.pid,
            measured_as=timing.measured_as.rsplit("/", 1)[0] if timing.measured_as else "",
        )
        if key == TEACHER:
            timings.teachers[host.node_id] = measured
            continue
        timings.students[key] = measured
        speedup = result.speedups.get(name, {}).get(reference) if result is not None else None
        if speedup is not None:
            speedups[key] = speedup.median
    return timings, speedups
