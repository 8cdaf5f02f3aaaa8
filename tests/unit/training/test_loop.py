"""The training loop's mechanics: schedules, accumulation, divergence, best-state restore, resume."""

from __future__ import annotations

import math

import pytest
import torch

from methods import get_method
from methods.base import MethodContext, StudentDefaults
from pipeline.config import TrainConfig
from pipeline.training import engine, evaluation, loop
from pipeline.training.step_bar import StepDisplay
from tests.conftest import make_tiny_bert
from tests.contract.test_method_contract import TASK, _Task, tiny_dataset


def kd_method(**params):
    teacher = make_tiny_bert(seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    ctx = MethodContext(task=TASK, teacher=teacher, load_pretrained=make_tiny_bert, student=StudentDefaults(num_layers=2), learning_rate=1e-3)
    return get_method("kd")({"num_layers": 2, **params}, ctx)


def test_lr_factor_warmup_then_linear_decay():
    # 10 steps, 2 of warm-up: 0.5, 1.0, then (10-s)/8
    got = [engine.lr_factor(s, 10, 2, "linear") for s in range(10)]
    assert got[:2] == [0.5, 1.0]
    assert got[2:] == [pytest.approx((10 - s) / 8) for s in range(2, 10)]
    assert engine.lr_factor(7, 10, 2, "constant") == 1.0


def _run(method, reporter=None, log_every=50, **train):
    settings = dict(max_steps=6, batch_size=8, learning_rate=1e-3, eval_every=3, warmup_ratio=0.0, progress_bar=False)
    settings.update(train)
    return loop.run(method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(32, seed=1)}, task=_Task(),
                    train=TrainConfig(**settings), seed=0, reporter=reporter, log_every=log_every)


def test_gradient_accumulation_matches_one_big_batch():
    # no dropout, so 2 x 4 accumulated equals 1 x 8 exactly (up to float error)
    a, b = kd_method(), kd_method()
    for m in (a, b):
        m.ctx.teacher.config.hidden_dropout_prob = 0.0
    a.build()
    b.build()
    for m in (a, b):
        for mod in m.model.modules():
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
    plan_a, plan_b = a.phases(1), b.phases(1)
    groups_a, groups_b = a.param_groups(plan_a[0]), b.param_groups(plan_b[0])
    train = TrainConfig(batch_size=8, learning_rate=1e-2, warmup_ratio=0.0, max_grad_norm=0.0)
    from methods.base import Progress
    from tests.conftest import make_batch

    batch = make_batch(batch_size=8, seed=4)
    progress = Progress(0, 1, "finetune", 0, 1)
    ea = engine.Engine(a, groups_a, plan_a[0], train, engine.Distributed(), 8)
    ea.micro_step(batch, progress, 1.0)
    ea.optimizer_step()
    eb = engine.Engine(b, groups_b, plan_b[0], train.model_copy(update={"grad_accumulation": 2}), engine.Distributed(), 4)
    for half in (slice(0, 4), slice(4, 8)):
        eb.micro_step({k: v[half] for k, v in batch.items()}, progress, 0.5)
    eb.optimizer_step()
    for (n, pa), pb in zip(a.model.named_parameters(), b.model.parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=1e-5, msg=n)


def test_nan_loss_raises_training_diverged(monkeypatch):
    method = kd_method()
    real_loss = type(method).loss

    def nan_loss(self, batch, progress):
        terms = real_loss(self, batch, progress)
        return {k: v * float("nan") for k, v in terms.items()}

    monkeypatch.setattr(type(method), "loss", nan_loss)
    with pytest.raises(loop.TrainingDiverged, match="not finite at step 0"):
        _run(method)


def test_each_report_carries_the_mean_losses_since_the_previous_one():
    reporter = loop.LocalReporter()
    result = _run(kd_method(), reporter=reporter, log_every=1, eval_every=2)
    per_step = [row["loss/total"] for row in result.history]  # log_every=1: one row per step
    assert len(per_step) == 6 and len(reporter.history) == 3
    for i, report in enumerate(reporter.history):
        assert report["loss/total"] == pytest.approx((per_step[2 * i] + per_step[2 * i + 1]) / 2)
        assert report["loss/total"] == pytest.approx(report["loss/kd"] + report["loss/task"])


def test_best_selectable_state_is_restored_and_reported():
    method = kd_method()
    reporter = loop.LocalReporter()
    result = loop.run(method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(32, seed=1)}, task=_Task(),
                      train=TrainConfig(max_steps=6, batch_size=8, learning_rate=1e-3, eval_every=2, progress_bar=False),
                      seed=0, reporter=reporter)
    accuracies = [r["eval/accuracy"] for r in reporter.history]
    assert len(accuracies) == 3 and result.best_metrics["eval/accuracy"] == max(accuracies)
    assert "epoch" in reporter.history[0] and "epoch" not in reporter.history[-1]
    # the restored model scores the best accuracy again
    again = evaluation.evaluate(method.eval_model(), {"dev": tiny_dataset(32, seed=1)}, _Task(), 16, torch.device("cpu"))
    assert again["eval/accuracy"] == result.best_metrics["eval/accuracy"]


@pytest.mark.parametrize("grouped", [False, True])
def test_resume_from_checkpoint_continues_where_it_stopped(tmp_path, monkeypatch, grouped):
    # run 1 stops (raises) after its 2nd evaluation; run 2 resumes from the checkpoint; grouped
    # by length, the resumed run takes the same grouped batches as the uninterrupted one
    method = kd_method()
    reporter = loop.LocalReporter(checkpoint_dir=tmp_path / "ckpt")
    calls = {"n": 0}
    original = reporter.report

    def report_then_crash(metrics, save):
        original(metrics, save)
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated crash")

    reporter.report = report_then_crash
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(method, reporter=reporter, max_steps=8, eval_every=2, group_by_length=grouped)
    resumed = kd_method()
    reporter2 = loop.LocalReporter(checkpoint_dir=tmp_path / "ckpt")
    result = _run(resumed, reporter=reporter2, max_steps=8, eval_every=2, log_every=1, group_by_length=grouped)
    assert [r["step"] for r in reporter2.history] == [6.0, 8.0]  # steps 1-4 were not redone
    assert result.steps == 8
    # steps 5-8 are exactly those of an uninterrupted run: same weights, batches and dropout draws
    straight = _run(kd_method(), max_steps=8, eval_every=2, log_every=1, group_by_length=grouped)
    resumed_losses = {r["step"]: r["loss/total"] for r in result.history if r["step"] > 4}
    straight_losses = {r["step"]: r["loss/total"] for r in straight.history if r["step"] > 4}
    assert resumed_losses.keys() == {5.0, 6.0, 7.0, 8.0}
    for step, value in straight_losses.items():
        assert math.isclose(resumed_losses[step], value, rel_tol=1e-5), step


@pytest.mark.parametrize(("strategy", "world", "expected"), [
    ("ddp", 1, "none"), ("ddp", 2, "ddp"), ("deepspeed", 1, "deepspeed"), ("deepspeed", 4, "deepspeed"), ("none", 1, "none"),
])
def test_ddp_with_one_worker_is_plain_training_and_distributed_applies_it(strategy, world, expected):
    assert engine.effective_strategy(strategy, world) == expected
    assert engine.Distributed(strategy=strategy, world_size=world).strategy == expected


def test_loss_means_keep_one_window_per_log_row_and_one_per_report():
    means = loop.LossMeans()
    means.add({"kd": 1.0, "total": 3.0})
    means.add({"kd": 3.0, "total": 5.0})
    assert means.take_row() == {"loss/kd": 2.0, "loss/total": 4.0}
    means.add({"kd": 5.0, "task": 1.0, "total": 6.0})  # a term computed in one step only counts that step
    assert means.take_row() == {"loss/kd": 5.0, "loss/task": 1.0, "loss/total": 6.0}
    assert means.take_since_eval() == {"loss/kd": 3.0, "loss/task": 1.0, "loss/total": pytest.approx(14 / 3)}
    assert means.take_since_eval() == {}


def test_a_checkpoint_holds_the_weights_once_when_the_latest_evaluation_is_the_best(tmp_path, monkeypatch):
    scores = iter([0.5, 0.75, 0.7])  # evaluation 2 is the best: at 2 the states coincide, at 3 they differ
    real = evaluation.evaluate

    def rising(*args, **kwargs):
        return {**real(*args, **kwargs), "eval/accuracy": next(scores)}

    monkeypatch.setattr(loop, "evaluate", rising)
    sizes = []
    reporter = loop.LocalReporter(checkpoint_dir=tmp_path / "ckpt")
    original = reporter.report

    def report(metrics, save):
        original(metrics, save)
        saved = torch.load(tmp_path / "ckpt" / loop.CHECKPOINT_FILE, weights_only=True)
        sizes.append((tmp_path / "ckpt" / loop.CHECKPOINT_FILE).stat().st_size)
        shared = saved["best"]["model"].keys() & saved["method"]["model"].keys()
        equal = all(torch.equal(saved["best"]["model"][k], saved["method"]["model"][k]) for k in shared)
        assert equal is (metrics["eval/accuracy"] == 0.75 or metrics["step"] == 2.0), metrics

    reporter.report = report
    method = kd_method()
    _run(method, reporter=reporter, max_steps=6, eval_every=2)
    weights = sum(v.numel() * v.element_size() for v in method.state_dict()["model"].values())
    assert sizes[1] < 1.5 * weights < sizes[2]  # the best's state and the current one: once when equal, twice apart


def test_the_loop_reports_step_and_total_and_feeds_the_display(monkeypatch):
    from pipeline.config import TrainConfig
    from pipeline.training import loop
    from tests.contract.test_method_contract import _Task, tiny_dataset

    shown: list[str] = []

    class Recording(StepDisplay):  # a log's display with no wait between heartbeats
        def __init__(self, label: str, total: int) -> None:
            super().__init__(label, total, mode="lines", every=0.0, emit=shown.append)

    monkeypatch.setattr(loop, "StepDisplay", Recording)
    monkeypatch.setattr(loop, "display_mode", lambda: "lines")
    reporter = loop.LocalReporter()
    train = TrainConfig(max_steps=6, batch_size=8, learning_rate=1e-3, eval_every=3, warmup_ratio=0.0)
    loop.run(kd_method(), train_set=tiny_dataset(), dev={"dev": tiny_dataset(32, seed=1)}, task=_Task(), train=train, seed=0,
             reporter=reporter, progress_label="kd")
    assert [(r["step"], r["total_steps"]) for r in reporter.history] == [(3.0, 6.0), (6.0, 6.0)]
    assert [line.split(",")[0] for line in shown] == [f"kd: {s}/6 steps" for s in range(1, 7)]
    assert "accuracy" not in shown[2] and shown[3].startswith("kd: 4/6 steps, accuracy ")  # the evaluation at step 3
    assert shown[-1].endswith(", finishing")


def test_a_rank_without_its_own_generators_in_the_checkpoint_keeps_its_seeded_ones(tmp_path):
    """A sweep resumed with more workers per trial (resources count for how it runs, not for
    --resume) has ranks the checkpoint holds no generators for: they continue from their seed,
    and an old checkpoint's single CPU state still reaches every rank."""
    dist = engine.Distributed(strategy="ddp", world_size=3, rank=2)
    (tmp_path / loop.RNG_FILE.format(rank=0)).write_bytes(b"")  # another rank's file only
    loop.seed_everything(0, 2)
    seeded = torch.get_rng_state()
    loop.restore_rng(tmp_path, dist, {"phase_index": 0})  # a new snapshot: no "rng" of its own
    assert torch.equal(torch.get_rng_state(), seeded)
    torch.manual_seed(5)
    old = torch.get_rng_state()
    loop.seed_everything(0, 2)
    loop.restore_rng(tmp_path, dist, {"rng": old})
    assert torch.equal(torch.get_rng_state(), old)


def test_the_loop_batches_rows_of_similar_length_when_train_groups_by_length(monkeypatch):
    from pipeline.training import batches

    tokens: dict[bool, int] = {}
    for grouped in (False, True):
        seen: list[int] = []
        original = batches.collate

        def recording(features, pad_id=0, seen=seen, original=original):
            batch = original(features, pad_id)
            seen.append(batch["input_ids"].numel())
            return batch

        monkeypatch.setattr(batches, "collate", recording)
        _run(kd_method(), max_steps=8, eval_every=8, group_by_length=grouped)
        monkeypatch.setattr(batches, "collate", original)
        tokens[grouped] = sum(seen[:8])  # the 8 training micro-batches; evaluation pads its own way
    assert tokens[True] < tokens[False]
