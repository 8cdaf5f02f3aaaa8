"""ASHA's time axis: the loop reports `progress` (a fraction of labeled training); the spec gives
the grace period in epochs. One function converts, and the rungs land where the spec says.

The Tune callback that shows the search from the sweep's process, fed Tune's events by hand
(Tune's trial objects stood in for: no Ray instance)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from methods import get_method
from pipeline.cli import logs
from pipeline.config import spec_from_dict
from pipeline.search.space import Trial
from pipeline.search.tuner import TIME_ATTR, SweepProgress, scheduler

BASE = {
    "name": "t", "task": {"name": "synthetic", "source": "synthetic"},
    "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50}},
    "methods": {"finetune": {}},
}


def rungs(asha: ASHAScheduler) -> list[float]:
    (bracket,) = asha._brackets  # Ray's internals: the milestones at which ASHA compares trials
    return sorted(milestone for milestone, _ in bracket._rungs)


@pytest.mark.parametrize("epochs,grace,reduction,expected", [
    (4, 1, 2.0, [0.25, 0.5, 1.0]),  # one epoch of four: rungs at 1, 2 and 4 epochs
    (2, 1, 2.0, [0.5, 1.0]),
    (3, 5, 2.0, [1.0]),  # a grace period longer than training: nothing is stopped early
    (4, 1, 4.0, [0.25, 1.0]),
])
def test_asha_compares_trials_at_fractions_of_their_labeled_training(epochs, grace, reduction, expected):
    spec = spec_from_dict({**BASE, "train": {"epochs": epochs},
                           "search": {"scheduler": "asha", "asha": {"grace_period": grace, "reduction_factor": reduction}}})
    asha = scheduler(spec, "eval/accuracy")
    assert isinstance(asha, ASHAScheduler)
    assert (asha._time_attr, asha._max_t, asha._metric, asha._mode) == (TIME_ATTR, 1.0, "eval/accuracy", "max")
    assert TIME_ATTR == "progress"  # the key the training loop reports
    assert rungs(asha) == pytest.approx(expected)


def test_fifo_stops_nothing():
    spec = spec_from_dict({**BASE, "search": {"scheduler": "fifo"}})
    assert type(scheduler(spec, "eval/accuracy")) is FIFOScheduler


@dataclass
class FakeTrial:
    config: dict[str, Any]
    status: str = "PENDING"


def trial(config_id: str, status: str = "PENDING") -> FakeTrial:
    return FakeTrial({"trial": Trial("kd", get_method("kd").Params(alpha=0.5), 0, config_id)}, status)


def test_a_log_gets_the_counts_each_evaluation_and_nothing_after_the_search(capsys):
    done, first, second = trial("a", "TERMINATED"), trial("b"), trial("c")
    trials = [done, first, second]
    with logs.configured(logs.NORMAL):  # pytest's capture is no terminal: lines
        progress = SweepProgress(3, "eval/accuracy")
        assert progress.mode == "lines"
        progress.setup(total_num_samples=3)
        progress.on_step_begin(iteration=0, trials=trials)  # a resumed search: kd-a-s0 finished before
        progress.on_trial_start(iteration=0, trials=trials, trial=first)
        progress.on_trial_result(iteration=1, trials=trials, trial=first,
                                 result={"step": 100, "total_steps": 400, "eval/accuracy": 0.8125, "progress": 0.25})
        progress.on_trial_result(iteration=2, trials=trials, trial=first, result={"drydock_final": 1.0, "eval/accuracy": 0.85})
        progress.on_step_end(iteration=2, trials=trials)  # within 15 s of its line: no heartbeat
        progress.on_trial_complete(iteration=3, trials=trials, trial=first)
        progress.on_trial_start(iteration=4, trials=trials, trial=second)
        progress.on_trial_error(iteration=5, trials=trials, trial=second)
        progress.on_experiment_end(trials=trials)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "search: 1 done, 1 running, 1 pending (trial kd-b-s0 started)"
    assert lines[1].startswith("trial kd-b-s0: 100/400 steps, accuracy 0.8125, ~") and lines[1].endswith(" left")
    assert lines[2:] == ["search: 2 done, 0 running, 1 pending", "search: 2 done, 1 running, 0 pending (trial kd-c-s0 started)",
                         "search: 3 done, 0 running, 0 pending"]


def test_quiet_shows_nothing_and_tuner_pkl_holds_a_stand_in(capsys):
    with logs.configured(logs.QUIET):
        progress = SweepProgress(1, "eval/accuracy")
        progress.on_trial_start(iteration=0, trials=[], trial=trial("a"))
        progress.on_step_end(iteration=0, trials=[])
    assert progress.mode == "off" and capsys.readouterr().out == ""
    restored = pickle.loads(pickle.dumps(progress))
    assert type(restored) is tune.Callback  # a live display is attached again on restore, never unpickled


def test_tune_logger_files_are_off_inside_the_fit_only_and_the_callers_value_comes_back(monkeypatch):
    import logging
    import os

    from pipeline.search.tuner import NO_TUNE_LOGGERS, without_tune_logger_files

    monkeypatch.delenv(NO_TUNE_LOGGERS, raising=False)
    analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
    missing = logging.LogRecord(analysis.name, logging.WARNING, __file__, 1, "Failed to fetch metrics for 2 trial(s):", None, None)
    other = logging.LogRecord(analysis.name, logging.WARNING, __file__, 1, "something else", None, None)
    with without_tune_logger_files():
        assert os.environ[NO_TUNE_LOGGERS] == "1"
        assert not all(f.filter(missing) for f in analysis.filters) and all(f.filter(other) for f in analysis.filters)
    assert NO_TUNE_LOGGERS not in os.environ and analysis.filters == []
    monkeypatch.setenv(NO_TUNE_LOGGERS, "0")
    with without_tune_logger_files():
        pass
    assert os.environ[NO_TUNE_LOGGERS] == "0"


def test_sweeps_that_overlap_in_one_process_leave_the_callers_value_when_the_last_one_ends(monkeypatch):
    # two notebook threads' `drydock.sweep`: A enters, B enters, A leaves (B still fitting), B leaves
    import logging
    import os

    from pipeline.search.tuner import NO_TUNE_LOGGERS, without_tune_logger_files

    monkeypatch.delenv(NO_TUNE_LOGGERS, raising=False)
    a, b = without_tune_logger_files(), without_tune_logger_files()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert os.environ.get(NO_TUNE_LOGGERS) == "1"  # B's fit is still running without the files
    b.__exit__(None, None, None)
    assert NO_TUNE_LOGGERS not in os.environ
    assert logging.getLogger("ray.tune.analysis.experiment_analysis").filters == []


def test_a_trial_trained_in_its_actor_reserves_its_workers_resources_there():
    from pipeline.config import spec_from_dict
    from pipeline.search.ray_instance import DRIVER_RESOURCES
    from pipeline.search.tuner import trial_resources

    base = {"name": "s", "task": {"name": "sst2", "source": "glue_dir", "glue_dir": "/unused"},
            "teacher": {"model": "bert-base-uncased"}, "methods": {"kd": {}}}

    def resources(**r):
        return trial_resources(spec_from_dict({**base, "resources": r}))

    assert resources() == DRIVER_RESOURCES == {"cpu": 0, "memory": 2**30}  # a Train job's workers hold them
    assert resources(trial_runner="tune-actor", cpus_per_worker=3) == {"cpu": 3, "memory": 2**30}
    assert resources(trial_runner="tune-actor", use_gpu=True, gpus_per_worker=0.5) == {"cpu": 1, "gpu": 0.5, "memory": 2**30}


def test_the_pruner_keeps_each_trials_latest_checkpoints_and_the_worker_resumes_from_the_newest_left(tmp_path):
    from types import SimpleNamespace

    from ray import tune

    from pipeline.search.tuner import CheckpointPruner
    from pipeline.search.worker import newest_checkpoint_beside

    def checkpoint(trial: str, n: int) -> tune.Checkpoint:
        folder = tmp_path / trial / f"checkpoint_{n:06d}"
        folder.mkdir(parents=True)
        return tune.Checkpoint.from_directory(str(folder))

    pruner = CheckpointPruner(keep=2)
    a, b = SimpleNamespace(trial_id="a"), SimpleNamespace(trial_id="b")
    for n in range(4):
        pruner.on_checkpoint(0, [], a, checkpoint("a", n))
    pruner.on_checkpoint(0, [], b, checkpoint("b", 0))
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["checkpoint_000002", "checkpoint_000003"]
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["checkpoint_000000"]  # each trial its own
    # a restored sweep's state may name one deleted since: the newest that is left is resumed from
    gone = tune.Checkpoint(str(tmp_path / "a" / "checkpoint_000001"))
    assert Path(newest_checkpoint_beside(gone).path).name == "checkpoint_000003"
    assert newest_checkpoint_beside(tune.Checkpoint(str(tmp_path / "c" / "checkpoint_000000"))) is None
