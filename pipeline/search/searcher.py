"""A Tune `Searcher` around the sweep's Optuna study that keeps seeds paired.

Why not Ray's `OptunaSearch` (ray/tune/search/optuna/optuna_search.py, Ray 2.60): it maps one Tune
trial to one study trial. Wrapped in Ray's `Repeater` to run a configuration once per seed, the
repeats get an index instead of the spec's seeds, the study is told the plain mean of whatever
each repeat's last result held — a trial ASHA stopped counts as a finished value, a failed one as
NaN — and only one metric is averaged, so the latency objective is lost. Here one study trial is
one configuration: it is asked once, handed to Tune as one `Trial` per seed (the seeds of a
configuration are suggested one after another, so they run side by side when trials fit), and
told once, when its last seed ends:

- every seed finished: the seed mean of the metric (and the student's latency, measured by the
  `latency` callable when the study aims at it);
- a seed stopped by ASHA, none failed: pruned, with the last value its seeds reported;
- a seed failed: failed.

The budget is `search.num_configurations` distinct configurations (a suggestion that repeats a
configuration already asked is told that configuration's result and asked again), and after
`search.time_budget` seconds no new configuration is asked. The searcher's own records travel with
Tune's experiment state (`save`/`restore`, written with the trials in one snapshot), the study in
its journal file; `--resume` reopens both, and a study trial asked after the snapshot (its
configuration never reached Tune) is told failed and does not count.
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

from pipeline.config import SweepSpec
from pipeline.errors import SpecError
from pipeline.measure.interleaved import Candidate, Interval, dominates
from pipeline.search import study as studies
from pipeline.search.driver import SearchContext
from pipeline.search.joint_space import param_name, suggest_configuration
from pipeline.search.journal_push import JournalPublisher, fetch_journal
from pipeline.search.search_latency import SearchLatency
from pipeline.search.space import Trial, config_id
from pipeline.search.state import SweepRun
from pipeline.search.warm_start import warm_start
from pipeline.storage import WorkStore
from pipeline.workdir import STUDY_FILE, atomic_write

logger = logging.getLogger(__name__)

# How many suggestions in a row may repeat configurations already asked before the space is taken
# as exhausted (each repeat is told at once, so the sampler moves on).
MAX_REPEATS = 50
FINAL = "drydock_final"  # the key of a trial driver's last report (`pipeline.search.driver`)


def point(config: Configuration) -> tuple[float, float]:
    """(seed-mean metric, latency ms) of a told complete configuration."""
    return sum(config.values.values()) / len(config.values), float(config.latency_ms if config.latency_ms is not None else math.nan)


def candidate(config: Configuration) -> Candidate:
    """The configuration as the front compares it (one search-time figure: an interval of width 0)."""
    metric, latency = point(config)
    return Candidate(config.trial.config_id, metric, Interval(latency, latency), 0.0)


def running_hypervolume(told: list[Configuration], reference: tuple[float, float]) -> list[float]:
    """The front's hypervolume after each told configuration. The front is kept as it grows (a
    newcomer no member dominates joins it and evicts those it dominates), so a sweep of a thousand
    configurations costs a thousand small fronts, not a thousand fronts of every prefix."""
    front: list[Configuration] = []
    curve = []
    for config in told:
        if config.told == "complete":
            front = grown_front(front, config)
        curve.append(hypervolume([point(c) for c in front], reference))
    return curve


def grown_front(front: list[Configuration], config: Configuration) -> list[Configuration]:
    """`front` with `config` told: it joins unless a member dominates it, and evicts the members it
    dominates (members stay in the order they were told). Dominance being a strict order, growing
    the front one configuration at a time gives the front of all of them, in the front's size per
    configuration instead of all of them."""
    new = candidate(config)
    if any(dominates(candidate(member), new) for member in front):
        return front
    return [member for member in front if not dominates(new, candidate(member))] + [config]


def hypervolume(points: list[tuple[float, float]], reference: tuple[float, float]) -> float:
    """The area that (metric, latency) points dominate above the reference's metric and below its
    latency: metric is maximised, latency minimised. 0 for no point inside the reference."""
    ref_metric, ref_latency = reference
    inside = sorted((lat, m) for m, lat in points if m > ref_metric and lat < ref_latency)
    area, best = 0.0, ref_metric
    for i, (latency, metric) in enumerate(inside):
        best = max(best, metric)
        upper = inside[i + 1][0] if i + 1 < len(inside) else ref_latency
        area += (best - ref_metric) * (upper - latency)
    return area


@dataclass
class Configuration:
    """One study trial: a configuration and how each of its seeds ended."""

    number: int  # the study trial's number
    order: int  # 1 for the first configuration this sweep asked, 2 for the next, …
    trial: Trial  # the configuration's seed-0 form; its seeds are copies with their own seed
    ended: dict[int, str] = field(default_factory=dict)  # seed -> finished | stopped | failed
    values: dict[int, float] = field(default_factory=dict)  # seed -> final metric (finished seeds)
    last: dict[int, float] = field(default_factory=dict)  # seed -> last reported metric
    steps: dict[int, int] = field(default_factory=dict)  # seed -> reports so far
    latency_ms: float | None = None
    told: str | None = None  # complete | pruned | failed, once told
    told_rank: int = 0  # 1 for the first configuration told, 2 for the next, … (the hypervolume's x axis)
    aliases: list[int] = field(default_factory=list)  # study trials that suggested it again while it ran


class ConfigurationSearcher(Searcher):
    """Asks the study for configurations and runs each once per seed (see the module's docstring)."""

    def __init__(self, spec: SweepSpec, metric_key: str, study_path: str,
                 latency: Callable[[Trial], float] | None = None, publish: Callable[[], None] | None = None) -> None:
        super().__init__(metric=None, mode=None)  # Tune checks no metric of ours in every result
        self.spec, self.metric_key, self.study_path = spec, metric_key, study_path
        self.latency, self.publish = latency, publish
        self.objectives = spec.search.aims_at
        self.seeds = list(spec.seeds)
        self.budget = spec.search.num_configurations or 0
        self.configs: dict[str, Configuration] = {}  # config_id -> configuration
        self.by_trial: dict[str, tuple[str, int]] = {}  # Tune trial id -> (config_id, seed)
        self.queue: list[tuple[str, int]] = []  # seeds of asked configurations not yet handed to Tune
        self.started = time.time()
        self._front_of: tuple[list[tuple[Configuration, str | None]], list[Configuration]] = ([], [])  # `front`'s last answer
        self.exhausted = False
        self.reference: tuple[float, float] | None = None  # (metric, latency ms) the hypervolume counts from
        self._study: Any = None

    # ------------------------------------------------------------------------------------------
    # the study
    # ------------------------------------------------------------------------------------------

    @property
    def study(self) -> Any:
        if self._study is None:
            studies.quiet_experimental_warnings()
            self._study = studies.open_study(self.spec, Path(self.study_path), self.objectives)
            self._forget_lost_asks()
            seeded = warm_start(self._study, self.spec, self.objectives)
            if seeded:
                logger.info("search: the study starts from %d configurations of %s", len(seeded), self.spec.search.warm_start)
        return self._study

    def _forget_lost_asks(self) -> None:
        """Study trials still running that no configuration here holds were asked after the last
        snapshot of a killed run: their configurations never reached Tune."""
        known = {c.number for c in self.configs.values()} | {n for c in self.configs.values() for n in c.aliases}
        for frozen in self._study.get_trials(deepcopy=False):
            if frozen.state == studies.TrialState.RUNNING and frozen.number not in known:
                studies.tell_failed(self._study, frozen.number)

    # ------------------------------------------------------------------------------------------
    # Tune's calls
    # ------------------------------------------------------------------------------------------

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # the spec said what to aim at; Tune's metric and mode are not ours

    def suggest(self, trial_id: str) -> dict[str, Any] | None:  # or Searcher.FINISHED, which Ray types as a dict
        if not self.queue and not self._ask():
            return Searcher.FINISHED  # type: ignore[return-value]  # the running configurations still end and are told
        cid, seed = self.queue.pop(0)
        self.by_trial[trial_id] = (cid, seed)
        base = self.configs[cid].trial
        return {"trial": Trial(base.method, base.params, seed, cid, order=base.order)}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id not in self.by_trial or result.get(FINAL):
            return
        cid, seed = self.by_trial[trial_id]
        value = result.get(self.metric_key)
        if isinstance(value, int | float) and math.isfinite(value):
            config = self.configs[cid]
            config.last[seed] = float(value)
            config.steps[seed] = config.steps.get(seed, 0) + 1

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        if trial_id not in self.by_trial:
            return
        cid, seed = self.by_trial[trial_id]
        config = self.configs[cid]
        if seed in config.ended:  # a restored trial ending again
            return
        value = (result or {}).get(self.metric_key)
        if error:
            config.ended[seed] = "failed"
        elif not (result or {}).get(FINAL):
            config.ended[seed] = "stopped"  # the scheduler ended it before its driver's last report
            if isinstance(value, int | float) and math.isfinite(value):  # the report it was stopped on reaches only here
                config.last[seed] = float(value)
                config.steps[seed] = config.steps.get(seed, 0) + 1
        elif isinstance(value, int | float) and math.isfinite(value):
            config.ended[seed], config.values[seed] = "finished", float(value)
        else:
            config.ended[seed] = "failed"  # its training failed: the driver reports NaN
        if len(config.ended) == len(self.seeds):
            self._tell(config)

    # ------------------------------------------------------------------------------------------
    # asking and telling
    # ------------------------------------------------------------------------------------------

    def _out_of_budget(self) -> bool:
        budget_s = self.spec.search.time_budget
        return (self.exhausted or len(self.configs) >= self.budget
                or (budget_s is not None and time.time() - self.started >= budget_s))

    def _ask(self) -> bool:
        """Ask the study for a new configuration and queue its seeds; False when none may be asked."""
        for _ in range(MAX_REPEATS):
            if self._out_of_budget():
                return False
            asked = self.study.ask()
            try:
                method, params = suggest_configuration(asked, self.spec)
            except SpecError as e:  # values each inside their domain that the method refuses together
                logger.warning("search: suggestion %d refused by its method (%s); told failed", asked.number, "; ".join(e.problems))
                studies.tell_failed(self.study, asked.number)
                continue
            cid = config_id(method, params)
            if cid in self.configs:  # a repeat: the study learns the result it already has, or will
                self._repeat(self.configs[cid], asked.number)
                continue
            asked.set_user_attr("config_id", cid)
            order = len(self.configs) + 1
            asked.set_user_attr("order", order)
            trial = Trial(method, params, self.seeds[0], cid, order=order)
            self.configs[cid] = Configuration(number=asked.number, order=order, trial=trial)
            self.queue.extend((cid, seed) for seed in self.seeds)
            self._publish()  # the work location's study holds every ask a snapshot of Tune's can name
            return True
        logger.warning("search: %d suggestions in a row were configurations already asked, seeded or refused; "
                       "the search ends after %d configurations", MAX_REPEATS, len(self.configs))
        self.exhausted = True
        return False

    def _repeat(self, config: Configuration, number: int) -> None:
        if config.told is None:
            config.aliases.append(number)  # told with the configuration
        else:
            self._tell_one(config, number)

    def _tell(self, config: Configuration) -> None:
        config.told_rank = len(self.told()) + 1
        ended = config.ended.values()
        if "failed" in ended:
            config.told = "failed"
        elif "stopped" in ended:
            config.told = "pruned"
        else:
            config.told = "complete"
            if "latency" in self.objectives:
                config.latency_ms = self._latency(config)
                config.told = "complete" if config.latency_ms is not None else "failed"
        for number in (config.number, *config.aliases):
            try:
                self._tell_one(config, number)
            except Exception:  # Tune would turn the finished trial into an errored one
                logger.exception("search: telling the study configuration %s (trial %d) failed", config.trial.config_id, number)
        self._publish()

    def _publish(self) -> None:
        """Push the study to the work location; a failure is logged, the next push carries it."""
        if self.publish is None:
            return
        try:
            self.publish()
        except Exception:  # noqa: BLE001 - a store that fails now must not fail the trial that just ended
            logger.exception("search: pushing the study to the work location failed")

    def _tell_one(self, config: Configuration, number: int) -> None:
        if config.told == "complete":
            metric = sum(config.values.values()) / len(config.values)
            values = {"metric": metric, "latency": config.latency_ms}
            studies.tell_values(self.study, number, [float(values[o]) for o in self.objectives])  # type: ignore[arg-type]
        elif config.told == "pruned":
            lasts = [config.last[s] for s in config.last]
            studies.tell_pruned(self.study, number, sum(lasts) / len(lasts) if lasts else None, max(config.steps.values(), default=0))
        else:
            studies.tell_failed(self.study, number)

    def _latency(self, config: Configuration) -> float | None:
        if self.latency is None:
            return None
        try:
            return float(self.latency(config.trial))
        except Exception as e:  # noqa: BLE001 - a student that cannot be timed is a failed configuration, not a failed sweep
            logger.warning("search: the latency of configuration %s could not be measured: %s", config.trial.config_id, e)
            return None

    # ------------------------------------------------------------------------------------------
    # Tune's snapshot of the search (its experiment state) and the progress table
    # ------------------------------------------------------------------------------------------

    def save(self, checkpoint_path: str) -> None:
        self._publish()  # the snapshot never names an ask the work location's study lacks
        state = {k: getattr(self, k) for k in ("configs", "by_trial", "queue", "exhausted")}
        state["elapsed"] = time.time() - self.started  # the time budget counts search time, not the pause of a kill
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)  # noqa: S301 - the snapshot this sweep wrote itself
        self.started = time.time() - state.pop("elapsed")
        for k, v in state.items():
            setattr(self, k, v)
        self._study = None  # reopened on first use, after the records it is reconciled with

    def __reduce__(self) -> tuple[Any, ...]:
        # Tune pickles its search algorithm into tuner.pkl; this one is made again on restore
        # (`pipeline.search.tuner`) with the live study, so only a stand-in is stored
        return (Searcher, ())

    def told(self) -> list[Configuration]:
        return sorted((c for c in self.configs.values() if c.told is not None), key=lambda c: c.told_rank)

    def front(self, told: list[Configuration] | None = None) -> list[Configuration]:
        """The told configurations (or those of `told`) no other dominates on the study's objectives."""
        told = self.told() if told is None else told
        marks = [(c, c.told) for c in told]
        folded, front = self._front_of
        if len(folded) > len(told) or not all(c is d and t == u for (c, t), (d, u) in zip(folded, marks)):
            folded, front = [], []  # not a continuation of the last list asked about: start again
        for config in told[len(folded):]:  # the progress line asks after every trial: only the newly told fold in
            if config.told == "complete":
                front = grown_front(front, config)
        self._front_of = (marks, front)
        return list(front)

    def summary(self) -> dict[str, Any]:
        """What the report shows of the search (`SEARCH_FILE`): every configuration as told, the
        front's hypervolume after each told configuration, and per method the parameters' share of
        the metric's variance (Optuna's fANOVA importances; a method needs 4 complete
        configurations and 2 searched parameters)."""
        told = self.told()
        curve = []
        if self.objectives == ("metric", "latency") and self.reference is not None:
            curve = running_hypervolume(told, self.reference)
        rows = [{"config_id": c.trial.config_id, "order": c.order, "told_rank": c.told_rank, "method": c.trial.method,
                 "told": c.told, "metric": point(c)[0] if c.told == "complete" else None, "latency_ms": c.latency_ms}
                for c in told]
        return {"algorithm": self.spec.search.algorithm, "objectives": list(self.objectives), "budget": self.budget,
                "reference": list(self.reference) if self.reference else None, "configurations": rows,
                "hypervolume": curve, "importances": self._importances()}

    def _importances(self) -> dict[str, dict[str, float]]:
        import optuna

        found: dict[str, dict[str, float]] = {}
        for method in self.spec.methods:
            names = [param_name(method, p) for p in self.spec.methods[method].domains()]
            complete = [c for c in self.told() if c.told == "complete" and c.trial.method == method]
            if len(names) < 2 or len(complete) < 4:
                continue
            try:
                # fANOVA (variance explained: the sign of the objective does not matter) over the trials
                # that have these parameters, i.e. this method's; Optuna's default evaluator would mix methods
                evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
                found[method] = optuna.importance.get_param_importances(
                    self.study, evaluator=evaluator, params=names, target=lambda t: t.values[0])
            except Exception as e:  # noqa: BLE001 - a report without importances, not a failed sweep
                logger.warning("search: the importances of %s could not be computed: %s", method, e)
        return found

    def progress_text(self) -> str:
        """The search's line: configurations told (how), and the front's size and hypervolume."""
        told = self.told()
        counts = {k: sum(c.told == k for c in told) for k in ("complete", "pruned", "failed")}
        text = (f"search: {len(told)} of {self.budget} configurations told ({counts['complete']} complete, "
                f"{counts['pruned']} pruned, {counts['failed']} failed)")
        front = self.front()
        if front and self.objectives == ("metric", "latency") and self.reference is not None:
            text += f"; front of {len(front)}, hypervolume {hypervolume([point(c) for c in front], self.reference):.4g}"
        return text


def study_searcher(spec: SweepSpec, context: SearchContext, store: WorkStore, run: SweepRun, teacher: Path) -> ConfigurationSearcher:
    """The sweep's searcher: its study in the run's folder (fetched first when the work location
    holds one: a resumed run on another machine), published after every ask and told configuration
    (`JournalPublisher`: what was appended since, so a sweep pushes linear bytes); when the
    study aims at latency, timed students (`SearchLatency`) and the teacher's latency as the
    hypervolume's reference (with a metric of 0)."""
    key = f"{Path(context.trials_dir).parent.as_posix()}/{STUDY_FILE}"
    if run.resuming and store.is_remote:
        # the location's journal and its parts, unless it still holds what this node pushed whole last
        # (this node's journal is then as new or newer): resumed elsewhere, or back after a resume elsewhere
        fetch_journal(store, key)
    latency = (SearchLatency(store, context.trials_dir, spec.selection.latency, runtimes=spec.selection.runtimes)
               if "latency" in spec.search.aims_at else None)
    searcher = ConfigurationSearcher(spec, context.metric_key, str(store.path(key)), latency=latency,
                                     publish=JournalPublisher(store, key) if store.is_remote else None)
    if latency is not None:
        searcher.reference = (0.0, latency.of_folder(teacher))
    return searcher


def write_search_summary(searcher: ConfigurationSearcher, path: Path, log: Callable[[str], None]) -> None:
    """The report's account of the search; one that cannot be written costs the report its Search
    section, never the select stage after it."""
    try:
        atomic_write(path, json.dumps(searcher.summary(), indent=2))
    except Exception as e:  # noqa: BLE001
        logger.exception("search: the summary for the report could not be written")
        log(f"warning: the report will have no Search section: {type(e).__name__}: {e}")
