"""The study searcher, driven the way Tune drives it (suggest, results, complete, snapshot):
paired seeds, what the study is told, the budget, and a resume from a snapshot."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from ray.tune.search import Searcher

from pipeline.config import spec_from_dict
from pipeline.search.searcher import ConfigurationSearcher

METRIC = "eval/accuracy"


def spec(algorithm: str = "motpe", budget: int = 4, seeds=(0, 1), **search):
    return spec_from_dict({
        "name": "s",
        "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/data/glue"},
        "teacher": {"model": "bert-base-uncased"},
        "seeds": list(seeds),
        "methods": {"kd": {"num_layers": {"randint": [1, 5]}, "alpha": {"uniform": [0.1, 0.9]}},
                    "theseus": {"num_layers": {"choice": [2, 3]}, "base_rate": {"uniform": [0.3, 0.7]}}},
        "search": {"algorithm": algorithm, "num_configurations": budget, **search},
    })


def searcher(tmp_path: Path, s=None, latency=lambda trial: 10.0 * (trial.params.num_layers or 6)):
    return ConfigurationSearcher(s or spec(), METRIC, str(tmp_path / "study.journal"), latency=latency)


def final(value: float) -> dict:
    return {"drydock_final": 1.0, METRIC: value}


def stored(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "study.journal"))))


def test_each_configuration_runs_once_per_seed_back_to_back_and_is_told_its_seed_mean_and_latency(tmp_path):
    s = searcher(tmp_path)
    first, second, third = (s.suggest(f"t{i}")["trial"] for i in range(3))
    # a configuration's seeds are suggested one after another: same configuration, the spec's seeds
    assert first.config_id == second.config_id and [first.seed, second.seed] == [0, 1]
    assert third.config_id != first.config_id and third.seed == 0
    assert first.params == second.params and first.order == second.order == 1 and third.order == 2
    s.on_trial_complete("t0", final(0.8))
    assert stored(tmp_path).trials[0].state == TrialState.RUNNING  # told only when its last seed ends
    s.on_trial_complete("t1", final(0.6))
    told = stored(tmp_path).trials[0]
    assert told.state == TrialState.COMPLETE
    assert told.values == pytest.approx([0.7, 10.0 * first.params.num_layers])
    assert told.user_attrs == {"config_id": first.config_id, "order": 1}


def test_a_configuration_asha_stopped_is_pruned_with_its_last_value_and_one_that_failed_is_failed(tmp_path):
    s = searcher(tmp_path, spec("tpe", budget=3))
    for i in range(6):
        s.suggest(f"t{i}")
    s.on_trial_result("t1", {METRIC: 0.65, "progress": 0.5})
    # no final report: the scheduler stopped it on this result, which Tune hands only to on_trial_complete
    s.on_trial_complete("t0", {METRIC: 0.55, "progress": 0.5})
    s.on_trial_complete("t1", final(0.9))
    s.on_trial_complete("t2", final(0.7))
    s.on_trial_complete("t3", final(math.nan))  # its training failed; the driver reports NaN
    s.on_trial_complete("t4", final(0.6))
    s.on_trial_complete("t5", None, error=True)
    trials = stored(tmp_path).trials
    assert [t.state for t in trials] == [TrialState.PRUNED, TrialState.FAIL, TrialState.FAIL]
    # TPE ranks a pruned trial by its last intermediate value: the mean of its seeds' last reports
    assert trials[0].intermediate_values == {1: pytest.approx(0.6)}  # one report per seed


def test_the_budget_counts_configurations_and_the_searcher_finishes_after_handing_out_their_seeds(tmp_path):
    s = searcher(tmp_path, spec("random", budget=2, seeds=(0, 1, 2)))
    handed = [s.suggest(f"t{i}") for i in range(6)]
    assert len({h["trial"].config_id for h in handed}) == 2
    assert sorted((h["trial"].config_id, h["trial"].seed) for h in handed) == sorted(
        (cid, seed) for cid in {h["trial"].config_id for h in handed} for seed in (0, 1, 2))
    assert s.suggest("t6") == Searcher.FINISHED


def test_a_repeated_suggestion_is_told_the_result_already_known_and_does_not_count(tmp_path):
    s = spec_from_dict({**spec("random", budget=2).model_dump(mode="json"),
                        "methods": {"kd": {"num_layers": {"choice": [1, 2]}}}})
    srch = searcher(tmp_path, s)
    a = srch.suggest("t0")["trial"]
    srch.suggest("t1")
    srch.on_trial_complete("t0", final(0.5))
    srch.on_trial_complete("t1", final(0.7))
    handed = [srch.suggest(f"t{i}") for i in range(2, 4)]
    second = handed[0]["trial"]
    assert second.config_id != a.config_id and srch.suggest("t9") == Searcher.FINISHED
    study = stored(tmp_path)
    repeats = [t for t in study.trials if t.number > 0 and t.params["kd.num_layers"] == a.params.num_layers]
    assert all(t.state == TrialState.COMPLETE and t.values[0] == pytest.approx(0.6) for t in repeats)
    assert len(srch.configs) == 2


def test_a_resumed_searcher_continues_the_same_study_without_repeating_or_losing_a_configuration(tmp_path):
    s = searcher(tmp_path, spec("motpe", budget=3))
    for i in range(4):
        s.suggest(f"t{i}")
    s.on_trial_complete("t0", final(0.8))
    s.on_trial_complete("t1", final(0.8))
    s.save(str(tmp_path / "snapshot.pkl"))
    s.suggest("t4")  # asked after the snapshot: its configuration never reached Tune
    asked_before_kill = {c.config_id for c in (s.configs[k].trial for k in s.configs)}

    again = searcher(tmp_path, spec("motpe", budget=3))
    again.restore(str(tmp_path / "snapshot.pkl"))
    again.on_trial_complete("t2", final(0.7))
    again.on_trial_complete("t3", final(0.9))
    handed = [again.suggest(f"r{i}") for i in range(3)]
    assert handed[2] == Searcher.FINISHED
    cids = [c.trial.config_id for c in sorted(again.configs.values(), key=lambda c: c.order)]
    assert len(cids) == len(set(cids)) == 3
    assert set(cids[:2]) <= asked_before_kill
    states = [t.state for t in stored(tmp_path).trials]
    # the two configurations of the snapshot are complete; the lost ask is failed, not counted
    assert states[:2] == [TrialState.COMPLETE, TrialState.COMPLETE] and states[2] == TrialState.FAIL
    assert states[3] == TrialState.RUNNING and len(states) == 4


def test_a_student_whose_latency_cannot_be_measured_fails_its_configuration(tmp_path):
    def broken(trial):
        raise RuntimeError("no student folder")

    s = searcher(tmp_path, latency=broken)
    s.suggest("t0"), s.suggest("t1")
    s.on_trial_complete("t0", final(0.8))
    s.on_trial_complete("t1", final(0.8))
    assert stored(tmp_path).trials[0].state == TrialState.FAIL


def test_hypervolume_of_a_two_point_front_is_the_union_of_their_rectangles():
    from pipeline.search.searcher import hypervolume

    # (metric, latency) against reference (0.5, 10): 0.9@8 covers 0.4×2 = 0.8; 0.7@2 adds 0.2×6 = 1.2
    assert hypervolume([(0.9, 8.0), (0.7, 2.0)], (0.5, 10.0)) == pytest.approx(0.8 + 1.2)
    assert hypervolume([(0.9, 8.0), (0.7, 2.0), (0.6, 9.0)], (0.5, 10.0)) == pytest.approx(2.0)  # dominated: nothing
    assert hypervolume([(0.4, 1.0), (0.9, 11.0)], (0.5, 10.0)) == 0.0  # outside the reference


def three_told(tmp_path):
    """Three configurations told, both seeds each: 0.8 at 4 ms, 0.6 at 2 ms, 0.5 at 6 ms (reference 0, 10 ms)."""
    latencies = {0.8: 4.0, 0.6: 2.0, 0.5: 6.0}
    told: list[float] = []
    s = searcher(tmp_path, latency=lambda trial: latencies[told[-1]])
    s.reference = (0.0, 10.0)
    for i, metric in enumerate(latencies):
        s.suggest(f"a{i}"), s.suggest(f"b{i}")
        told.append(metric)
        s.on_trial_complete(f"a{i}", final(metric))
        s.on_trial_complete(f"b{i}", final(metric))
    return s


def test_the_progress_line_counts_told_configurations_and_the_fronts_hypervolume(tmp_path):
    s = three_told(tmp_path)
    # front: 0.8@4 and 0.6@2 (0.5@6 is dominated): 0.6×2 + 0.8×6 = 6.0
    assert s.progress_text() == "search: 3 of 4 configurations told (3 complete, 0 pruned, 0 failed); front of 2, hypervolume 6"


def test_a_suggestion_its_method_refuses_is_told_failed_and_the_next_one_runs(tmp_path, monkeypatch):
    from pipeline.errors import SpecError
    from pipeline.search import searcher as module

    real, calls = module.suggest_configuration, []

    def refuse_first(trial, spec):
        calls.append(trial.number)
        if len(calls) == 1:
            raise SpecError(["methods.kd: refused together"])
        return real(trial, spec)

    monkeypatch.setattr(module, "suggest_configuration", refuse_first)
    s = searcher(tmp_path)
    assert s.suggest("t0")["trial"].order == 1  # the refused suggestion does not count
    assert [t.state for t in stored(tmp_path).trials] == [TrialState.FAIL, TrialState.RUNNING]


def test_a_study_push_that_fails_neither_fails_the_trial_nor_loses_the_tell(tmp_path):
    def down():
        raise OSError("the bucket is unreachable")

    s = ConfigurationSearcher(spec(), METRIC, str(tmp_path / "study.journal"), latency=lambda t: 5.0, publish=down)
    s.suggest("t0"), s.suggest("t1")
    s.on_trial_complete("t0", final(0.8))
    s.on_trial_complete("t1", final(0.6))  # Tune would mark the trial errored if this raised
    assert stored(tmp_path).trials[0].values == pytest.approx([0.7, 5.0])


def test_a_snapshot_is_pushed_with_the_study_so_it_never_names_an_ask_the_location_lacks(tmp_path):
    pushed = []
    s = ConfigurationSearcher(spec(), METRIC, str(tmp_path / "study.journal"), latency=lambda t: 5.0,
                              publish=lambda: pushed.append(len(stored(tmp_path).trials)))
    s.suggest("t0")
    assert pushed == [1]  # after the ask
    s.save(str(tmp_path / "snapshot.pkl"))
    assert pushed == [1, 1]


def test_the_summary_holds_every_told_configuration_and_the_hypervolume_after_each(tmp_path):
    s = three_told(tmp_path)
    summary = s.summary()
    # 0.8@4: 0.8×6 = 4.8; + 0.6@2: 0.6×2 + 0.8×6 = 6.0; + 0.5@6, dominated: 6.0
    assert summary["hypervolume"] == pytest.approx([4.8, 6.0, 6.0])
    assert [(c["told_rank"], c["metric"], c["latency_ms"]) for c in summary["configurations"]] == [
        (1, pytest.approx(0.8), 4.0), (2, pytest.approx(0.6), 2.0), (3, pytest.approx(0.5), 6.0)]
    assert summary["importances"] == {}  # fewer than 4 complete configurations of a method


def test_the_running_hypervolume_equals_each_prefixs_own_front_and_stays_linear():
    """The summary's curve keeps one front as configurations are told; it must equal the front of
    every prefix recomputed from scratch (ties, dominated newcomers, evictions, pruned ones
    between), and a thousand configurations must not cost a thousand prefix fronts."""
    import random
    import time

    from pipeline.search.searcher import Configuration, hypervolume, running_hypervolume
    from pipeline.search.space import Trial

    rng = random.Random(7)
    told = []
    for i in range(300):
        c = Configuration(number=i, order=i + 1, trial=Trial("kd", None, 0, f"c{i}"), told=rng.choice(["complete"] * 4 + ["pruned"]),
                          told_rank=i + 1, latency_ms=float(rng.choice([1, 2, 3, 4, 5, 6, 7, 8])))
        c.values = {0: rng.choice([0.5, 0.6, 0.7, 0.8, 0.9])}
        told.append(c)
    reference = (0.4, 9.0)

    def prefix_front(prefix):
        points = [(c.values[0], c.latency_ms) for c in prefix if c.told == "complete"]
        return [p for p in points if not any(o[0] >= p[0] and o[1] <= p[1] and o != p for o in points)]

    curve = running_hypervolume(told, reference)
    assert curve == pytest.approx([hypervolume(prefix_front(told[:i]), reference) for i in range(1, len(told) + 1)])
    assert curve[-1] == pytest.approx(0.5 * 1 * 8)  # 0.9 at 1 ms is drawn: it dominates everything

    many = told * 4  # 1,200 told configurations
    started = time.perf_counter()
    running_hypervolume(many, reference)
    assert time.perf_counter() - started < 2.0


def test_importances_are_each_methods_own_and_sum_to_one(tmp_path):
    only_kd = spec_from_dict({**spec("tpe", budget=6, seeds=(0,)).model_dump(mode="json"),
                              "methods": {"kd": {"num_layers": {"randint": [1, 5]}, "alpha": {"uniform": [0.1, 0.9]}}}})
    s = searcher(tmp_path, only_kd, latency=None)
    for i in range(6):
        trial = s.suggest(f"t{i}")["trial"]
        s.on_trial_complete(f"t{i}", final(0.5 + 0.1 * trial.params.num_layers))  # depth decides everything
    found = s.summary()["importances"]["kd"]
    assert set(found) == {"kd.num_layers", "kd.alpha"} and sum(found.values()) == pytest.approx(1.0)
    assert found["kd.num_layers"] > found["kd.alpha"]


def test_the_front_grows_with_each_told_configuration_instead_of_comparing_every_pair(tmp_path, monkeypatch):
    """The progress line after each trial asks for the front: comparing every pair of a thousand
    configurations was a million dominance checks per trial (the driver's CPU at 1,000 searched
    configurations, benchmarks/RESULTS.md); grown one configuration at a time it is the front's
    size per configuration, and the same front."""
    from pipeline.search import searcher as module
    from pipeline.search.space import Trial

    s = searcher(tmp_path)
    configs = []
    for i in range(300):  # every 30th is better and slower than the one before: a front of 10; c0 dominates the rest
        c = module.Configuration(number=i, order=i + 1, trial=Trial("kd", None, 0, f"c{i}", order=i + 1),
                                 values={0: 0.5 + (i % 30 == 0) * i / 1000}, latency_ms=float(i + 1),
                                 told="complete", told_rank=i + 1)
        configs.insert(0, c)  # told slowest first: a configuration's dominators come after it
    pairwise = [c for c in configs if not any(module.dominates(module.candidate(o), module.candidate(c)) for o in configs)]
    calls = []
    real = module.dominates
    monkeypatch.setattr(module, "dominates", lambda a, b, **kw: calls.append(1) or real(a, b, **kw))
    front = s.front(configs)
    assert [c.trial.config_id for c in front] == [c.trial.config_id for c in pairwise] == [f"c{i}" for i in range(270, -1, -30)]
    assert len(calls) <= 300 * 2 * 11  # at most twice the front's size per configuration; pairwise: about 300² / 2


def test_the_front_asked_after_each_told_configuration_folds_in_only_the_new_one(tmp_path, monkeypatch):
    """Ties make large fronts (students of one architecture and one metric): asked after every
    trial, the front is grown from the last answer, not from the first told configuration."""
    from pipeline.search import searcher as module
    from pipeline.search.space import Trial

    s = searcher(tmp_path)
    told = []
    calls = []
    real = module.dominates
    monkeypatch.setattr(module, "dominates", lambda a, b, **kw: calls.append(1) or real(a, b, **kw))
    for i in range(200):  # all tied: every configuration is on the front
        told.append(module.Configuration(number=i, order=i + 1, trial=Trial("kd", None, 0, f"c{i}", order=i + 1),
                                         values={0: 0.5}, latency_ms=5.0, told="complete", told_rank=i + 1))
        assert len(s.front(list(told))) == i + 1
    assert len(calls) <= 2 * 200 * 200 / 2 * 1.05  # each newcomer against the front once (both ways); from scratch: 200³ / 3
    assert [c.trial.config_id for c in s.front(told[:50])] == [f"c{i}" for i in range(50)]  # another list: from scratch
