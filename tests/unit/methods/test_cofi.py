"""CoFi the method (methods/cofi.py): plan, layer matching, losses, surgery, resume, export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from methods._l0 import LOG_ALPHA_MAX, LOG_ALPHA_MIN
from methods._pruned_bert import PrunedBertForSequenceClassification
from methods.base import MethodContext, Progress, TaskInfo, logits_of
from methods.cofi import (
    CoFi,
    distilled_teacher_layers,
    identity_linear,
    layer_distillation_loss,
    match_layers,
    phase_steps,
)
from pipeline.config import TrainConfig
from pipeline.training.engine import Distributed, Engine, check_groups
from pipeline.training.export import count_parameters
from tests.conftest import make_batch, make_tiny_bert

INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")



def make_cofi(task: str = "tiny", **params) -> CoFi:
    teacher = make_tiny_bert(num_layers=4, seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    ctx = MethodContext(task=TaskInfo(task, 2, False, ("neg", "pos")), teacher=teacher, load_pretrained=None, learning_rate=1e-3)
    method = CoFi(params, ctx)
    method.build()
    return method


def _inputs(seed: int = 5) -> dict[str, torch.Tensor]:
    return {k: v for k, v in make_batch(batch_size=4, seq_len=12, seed=seed).items() if k in INPUT_KEYS}


def _eval_logits(method: CoFi, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    model = method.eval_model().eval()
    with torch.no_grad():
        return logits_of(model(**batch))


@torch.no_grad()
def _force_masks(method: CoFi) -> None:
    """Log α that prune a third of the hidden dims, two heads, layer 1's FFN, layer 2's attention."""
    masks = method.model.masks
    off = -10.0  # keep probability 2e-4: each counts as a full expected zero
    masks.hidden[::3] = off
    masks.heads[0, :2] = off
    masks.ffn[1] = off
    masks.mha[2] = off


def test_phase_steps_add_up_and_follow_the_fractions():
    assert phase_steps(100, 0.05, 0.6) == (5, 60, 35)
    assert phase_steps(6, 0.2, 0.5) == (1, 3, 2)
    assert phase_steps(10, 0.0, 1.0) == (0, 10, 0)
    method = make_cofi(distill_warmup_fraction=0.1, pruning_fraction=0.5)
    plan = method.phases(40)
    assert [(p.name, p.steps) for p in plan] == [("distill_warmup", 4), ("prune", 20), ("finetune", 16)]
    assert [p.select for p in plan] == [False, False, True]  # only the pruned model may be exported
    assert plan[1].trainable == ("student", "masks", "lagrangian")


def test_params_reject_phases_longer_than_the_trial():
    with pytest.raises(ValueError, match="must not exceed 1"):
        CoFi.Params.model_validate({"distill_warmup_fraction": 0.5, "pruning_fraction": 0.6})


def test_distilled_teacher_layers_every_third_from_the_top():
    assert distilled_teacher_layers(12, 3) == [2, 5, 8, 11]
    assert distilled_teacher_layers(6, 3) == [2, 5]
    assert distilled_teacher_layers(4, 3) == [0, 3]
    assert distilled_teacher_layers(4, 1) == [0, 1, 2, 3]


def test_match_layers_picks_the_closest_available_layer():
    distances = torch.tensor([[0.1, 0.5, 0.9], [0.2, 0.05, 0.3]])
    everyone = torch.ones(3, dtype=torch.bool)
    assert match_layers(distances, everyone, ordered=False) == [0, 1]
    assert match_layers(distances, torch.tensor([False, True, True]), ordered=False) == [1, 1]
    assert match_layers(distances, torch.zeros(3, dtype=torch.bool), ordered=False) == [2, 2]


def test_match_layers_honours_the_order_constraint():
    # unconstrained both teacher layers pick student layer 1; ordered, the top teacher layer keeps
    # 1 and the one below must take a layer strictly below it
    distances = torch.tensor([[0.9, 0.1, 0.5, 0.8], [0.3, 0.2, 0.9, 0.9]])
    everyone = torch.ones(4, dtype=torch.bool)
    assert match_layers(distances, everyone, ordered=False) == [1, 1]
    assert match_layers(distances, everyone, ordered=True) == [0, 1]
    # the top teacher layer prefers student layer 0: nothing is left below, so it is shared
    bottom = torch.tensor([[0.9, 0.1, 0.5, 0.8], [0.1, 0.2, 0.9, 0.9]])
    assert match_layers(bottom, everyone, ordered=True) == [0, 0]
    # pruned student layers are never matched, with or without the constraint
    skipping = torch.tensor([[0.5, 0.1, 0.2, 0.9], [0.9, 0.1, 0.3, 0.4]])
    available = torch.tensor([True, False, True, True])
    assert match_layers(skipping, available, ordered=False) == [2, 2]
    assert match_layers(skipping, available, ordered=True) == [0, 2]
    # a crossing-free unconstrained choice is kept as is
    monotone = torch.tensor([[0.1, 0.9, 0.9], [0.9, 0.9, 0.1]])
    assert match_layers(monotone, torch.ones(3, dtype=torch.bool), ordered=True) == [0, 2]


def test_layer_distillation_loss_sums_the_matched_mse_with_gradient_to_the_match_only():
    torch.manual_seed(0)
    teacher = [torch.randn(2, 3, 4) for _ in range(2)]
    student = [
        (teacher[1] + 1.0).requires_grad_(),  # MSE 1 to teacher layer 1
        (teacher[0] + 0.1).requires_grad_(),  # MSE 0.01 to teacher layer 0
        (teacher[1] + 0.3).requires_grad_(),  # MSE 0.09 to teacher layer 1: the closest
    ]
    loss = layer_distillation_loss(student, teacher, identity_linear(4), torch.ones(3, dtype=torch.bool), ordered=True)
    assert float(loss.detach()) == pytest.approx(0.01 + 0.09, rel=1e-5)
    loss.backward()
    assert student[0].grad is None or torch.all(student[0].grad == 0)
    assert student[1].grad.abs().sum() > 0 and student[2].grad.abs().sum() > 0


def test_param_groups_per_phase():
    method = make_cofi(learning_rate=2e-3, finetune_learning_rate=5e-4, reg_learning_rate=0.05)
    warmup, prune, finetune = method.phases(20)
    method.start_phase(warmup)
    groups = {g.name: g for g in method.param_groups(warmup)}
    assert set(groups) == {"student", "student.no_decay"}
    trained = {id(p) for g in groups.values() for p in g.params}
    embeddings = method.model.student.bert.embeddings.word_embeddings.weight
    assert id(embeddings) not in trained  # embeddings frozen by default
    assert id(method.model.layer_map.weight) in trained
    assert groups["student"].lr == 2e-3 and groups["student"].schedule == "constant"

    method.start_phase(prune)
    groups = {g.name: g for g in method.param_groups(prune)}
    assert groups["student"].schedule == "linear"
    assert groups["masks"].lr == 0.05 and not groups["masks"].maximize and groups["masks"].weight_decay == 0
    assert groups["lagrangian"].maximize and groups["lagrangian"].lr == 0.05  # ascent, positive lr
    assert len(groups["masks"].params) == 5 and len(groups["lagrangian"].params) == 2

    method.start_phase(finetune)
    groups = {g.name: g for g in method.param_groups(finetune)}
    assert set(groups) == {"student", "student.no_decay"} and groups["student"].lr == 5e-4


def test_on_step_reports_the_ramped_target_and_the_multipliers():
    method = make_cofi(target_sparsity=0.6, sparsity_warmup_fraction=0.5)
    warmup, prune, _ = method.phases(20)
    method.after_optimizer_step(Progress(0, 40, warmup.name, 0, warmup.steps))  # a warm-up step clamps log α
    method.start_phase(prune)
    values = [method.on_step(Progress(s, 40, "prune", s, 20))["target_sparsity"] for s in (0, 5, 10, 15)]
    assert values == pytest.approx([0.0, 0.3, 0.6, 0.6])
    report = method.on_step(Progress(10, 40, "prune", 10, 20))
    assert set(report) == {"target_sparsity", "expected_sparsity", "lambda1", "lambda2"}
    # FFN parameters are half of this encoder (2·H·I = 4·H²); with the FFN dims at keep 0.832 and
    # the always-on masks clamped to keep 0.998: 1 − (0.998³ + 0.998²·0.832) / 2
    assert report["expected_sparsity"] == pytest.approx(0.0888, abs=0.002)
    assert report["lambda1"] == 0.0 and report["lambda2"] == 0.0


def test_loss_terms_per_phase():
    method = make_cofi(task_weight=0.5)
    batch = make_batch(batch_size=4, seq_len=12, seed=2)
    warmup, prune, finetune = method.phases(9)
    method.start_phase(warmup)
    assert set(method.loss(batch, Progress(0, 9, warmup.name, 0, 3))) == {"distill_pred", "distill_layer", "task"}
    method.start_phase(prune)
    method.on_step(Progress(3, 9, prune.name, 0, 3))
    terms = method.loss(batch, Progress(3, 9, prune.name, 0, 3))
    assert set(terms) == {"distill_pred", "distill_layer", "task", "lagrangian"}
    assert float(terms["lagrangian"].detach()) == 0.0  # λ1 = λ2 = 0 at the start
    method.start_phase(finetune)
    assert set(method.loss(batch, Progress(6, 9, finetune.name, 0, 3))) == {"distill_pred", "distill_layer", "task"}
    method.params = method.Params.model_validate({"finetune_distill": False})
    assert set(method.loss(batch, Progress(6, 9, finetune.name, 0, 3))) == {"task"}


def test_order_constraint_defaults_on_for_small_glue_tasks():
    assert make_cofi(task="rte")._ordered() and make_cofi(task="sts-b")._ordered()
    assert not make_cofi(task="sst2")._ordered()
    assert make_cofi(task="sst2", layer_order_constraint="on")._ordered()


def test_surgery_shrinks_the_model_and_keeps_its_function():
    method = make_cofi(binarise_tolerance=None)
    warmup, prune, finetune = method.phases(9)
    method.start_phase(warmup)
    method.start_phase(prune)
    _force_masks(method)
    batch = _inputs()
    before = _eval_logits(method, batch)
    size_before = count_parameters(method.model.student)[0]
    method.start_phase(finetune)
    student = method.model.student
    assert isinstance(student, PrunedBertForSequenceClassification)
    assert method.model.masks is None and method.model.lagrangian is None
    assert student.config.hidden_size == 32 - 11 and student.config.layer_heads == [2, 4, 0, 4]
    assert student.bert.encoder.layer[1].intermediate is None
    assert method.model.layer_map.weight.shape == (32, 21)  # student hidden → teacher hidden
    assert count_parameters(student)[0] < size_before
    torch.testing.assert_close(_eval_logits(method, batch), before, atol=1e-5, rtol=1e-5)
    assert method.on_step(Progress(6, 9, finetune.name, 0, 3))["sparsity"] > 0.3


@pytest.mark.parametrize(("target", "moved"), [(0.8, True), (0.56, True), (0.595, False)])
def test_surgery_moves_binary_masks_that_miss_the_target_onto_it(target, moved):
    """The forced masks (with the FFN dimensions' initial drop rate) binarise to 0.5911 of the
    tiny encoder pruned: 0.8 and 0.56 targets are missed by more than the tolerance, so the surgery
    prunes more or less; a 0.595 target is within it and nothing moves."""
    method = make_cofi(target_sparsity=target, binarise_tolerance=0.01)
    warmup, prune, finetune = method.phases(9)
    method.start_phase(warmup)
    method.start_phase(prune)
    _force_masks(method)
    method.start_phase(finetune)
    report = method.on_step(Progress(6, 9, finetune.name, 0, 3))
    assert report["binarised_trained_sparsity"] == pytest.approx(0.5911, abs=1e-4)
    assert (report["binarise_offset"] != 0) == moved
    if moved:
        assert abs(report["sparsity"] - target) < 0.02
    else:
        assert report["sparsity"] == pytest.approx(report["binarised_trained_sparsity"], abs=1e-6)
    restored = make_cofi(target_sparsity=target)
    for phase in (warmup, prune, finetune):
        restored.start_phase(phase)
    restored.load_state_dict(method.state_dict())
    assert restored.on_step(Progress(6, 9, finetune.name, 0, 3)) == report  # resume keeps the record


def test_lagrangian_drives_a_tiny_models_sparsity_to_the_target():
    """The whole pruning objective (distillation + Lagrangian) through the loop's engine."""
    torch.manual_seed(0)
    steps = 160
    method = make_cofi(
        target_sparsity=0.5, distill_warmup_fraction=0.0, pruning_fraction=1.0, sparsity_warmup_fraction=0.3,
        reg_learning_rate=0.1,
    )
    prune = method.phases(steps)[1]
    method.start_phase(prune)
    groups = method.param_groups(prune)
    check_groups(groups, prune, method.model)
    train = TrainConfig(batch_size=4, learning_rate=1e-3, warmup_ratio=0.0, max_grad_norm=1.0)
    engine = Engine(method, groups, prune, train, Distributed(), micro_batch=4)
    batch = make_batch(batch_size=4, seq_len=8, seed=3)
    for step in range(steps):
        progress = Progress(step, steps, prune.name, step, steps)
        report = method.on_step(progress)
        engine.micro_step(batch, progress, 1.0)
        engine.optimizer_step()
        method.after_optimizer_step(progress)
    assert report["target_sparsity"] == 0.5
    assert abs(report["expected_sparsity"] - 0.5) < 0.02
    assert report["lambda2"] > 0


def test_log_alpha_is_clamped_after_the_optimizer_step_and_on_step_leaves_it_alone():
    """The official trainer clamps log α after each optimizer step (constrain_parameters): the
    loop does, from the masks group's bounds; on_step runs before the forward and must not
    change parameters (methods/base.py)."""
    torch.manual_seed(0)
    method = make_cofi(distill_warmup_fraction=0.0, pruning_fraction=1.0, reg_learning_rate=20.0)
    prune = method.phases(4)[1]
    method.start_phase(prune)
    groups = method.param_groups(prune)
    train = TrainConfig(batch_size=4, learning_rate=1e-3, warmup_ratio=0.0, max_grad_norm=1.0)
    engine = Engine(method, groups, prune, train, Distributed(), micro_batch=4)
    masks = method.model.masks

    def log_alphas() -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in masks.parameters()]).clone()

    low, high = torch.tensor(LOG_ALPHA_MIN), torch.tensor(LOG_ALPHA_MAX)
    progress = Progress(0, 4, prune.name, 0, 4)
    before = log_alphas()
    assert before.max() == high  # the always-on masks (log α 10) were clamped when pruning started
    with torch.no_grad():
        next(masks.parameters()).add_(50.0)  # out of range, as an optimizer step can push them
    pushed = log_alphas()
    method.on_step(progress)
    assert torch.equal(log_alphas(), pushed)  # on_step only evaluates schedules
    engine.micro_step(make_batch(batch_size=4, seq_len=8, seed=3), progress, 1.0)
    # at a learning rate of 20, Adam's first step moves each log α by ~20, past both ends; the
    # masks group's bounds make the loop clamp them back as part of the step
    assert [g.bounds for g in groups if g.name == "masks"] == [(LOG_ALPHA_MIN, LOG_ALPHA_MAX)]
    engine.optimizer_step()
    stepped = log_alphas()
    assert stepped.min() == low and stepped.max() == high
    assert not torch.equal(stepped, pushed.clamp(low, high))  # it did step
    method.after_optimizer_step(progress)  # the method's own clamp (no optimizer masters here): a no-op now
    assert torch.equal(log_alphas(), stepped)


def test_resume_across_the_surgery_replays_into_the_same_model():
    batch = _inputs()
    original = make_cofi()
    plan = original.phases(9)
    original.start_phase(plan[0])
    original.start_phase(plan[1])
    _force_masks(original)
    boundary = original.state_dict()  # snapshot at the end of pruning: before the surgery
    assert boundary["pruned_shape"] is None
    original.start_phase(plan[2])
    pruned_state = original.state_dict()
    expected = _eval_logits(original, batch)

    # a snapshot at the boundary: replay the phases before it, load, then the surgery runs
    resumed = make_cofi()
    for phase in plan[:2]:
        resumed.start_phase(phase)
    resumed.load_state_dict(boundary)
    resumed.start_phase(plan[2])
    assert resumed.model.student.config.to_dict()["layer_heads"] == [2, 4, 0, 4]
    torch.testing.assert_close(_eval_logits(resumed, batch), expected)

    # mid-fine-tuning: the replayed surgery used fresh masks; loading rebuilds the saved shape
    midway = make_cofi()
    for phase in plan:
        midway.start_phase(phase)
    assert midway.model.student.config.hidden_size != 21  # the replayed surgery cut fresh masks
    midway.load_state_dict(pruned_state)
    assert midway.model.student.config.hidden_size == 21
    torch.testing.assert_close(_eval_logits(midway, batch), expected)
    groups = midway.param_groups(plan[2])  # the rebuilt parameters, handed out again
    assert {id(p) for g in groups for p in g.params} >= {id(p) for p in midway.model.layer_map.parameters()}
    assert "distill_layer" in midway.loss(make_batch(batch_size=4, seq_len=12), Progress(6, 9, "finetune", 1, 3))

    # and back: an unpruned state restores the masked model
    midway.load_state_dict(boundary)
    assert midway.model.masks is not None


def test_loss_refuses_parameters_rebuilt_after_the_optimizer_was_built():
    original = make_cofi()
    plan = original.phases(9)
    for phase in plan:
        original.start_phase(phase)
    state = original.state_dict()
    other = make_cofi()
    for phase in plan:
        other.start_phase(phase)
    with torch.no_grad():
        other.model.student.classifier.bias.add_(1.0)  # make it differ from `state`
    other.param_groups(plan[2])
    other.load_state_dict(state)  # same shape: loaded in place, the optimizer's tensors stay valid
    other.loss(make_batch(batch_size=2, seq_len=8), Progress(6, 9, "finetune", 1, 3))
    boundary = make_cofi()
    boundary.start_phase(plan[0])
    other.load_state_dict(boundary.state_dict())  # the other structure: parameters replaced
    with pytest.raises(RuntimeError, match="param_groups"):
        other.loss(make_batch(batch_size=2, seq_len=8), Progress(6, 9, "finetune", 1, 3))


def test_export_before_and_after_surgery_matches_eval_model_and_reloads(tmp_path, tiny_tokenizer, monkeypatch):
    from pipeline.training.export import reload_logits_in_fresh_process, save_student

    method = make_cofi()
    warmup, prune, finetune = method.phases(9)
    method.start_phase(warmup)
    batch = _inputs()
    torch.testing.assert_close(logits_of(method.export()(**batch)), _eval_logits(method, batch), atol=1e-5, rtol=1e-5)
    method.start_phase(prune)
    _force_masks(method)
    exported = method.export()
    with torch.no_grad():
        torch.testing.assert_close(exported(**batch).logits, _eval_logits(method, batch), atol=1e-5, rtol=1e-5)
    method.start_phase(finetune)
    exported = method.export()
    assert exported is not method.model.student  # a copy: later training cannot change it
    folder = save_student(exported, tiny_tokenizer, tmp_path / "cofi", method.ctx.task, {"method": "cofi"})
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSequenceClassification"] == "_pruned_bert.PrunedBertForSequenceClassification"
    assert (folder / "_pruned_bert.py").is_file()  # the architecture travels with the weights
    assert config["id2label"] == {"0": "neg", "1": "pos"}
    # a fresh interpreter in which `methods` and `pipeline` cannot be imported; given the folder as
    # `drydock train --output out/x` gives it: relative to this process's directory, not the verifier's
    monkeypatch.chdir(tmp_path)
    got = reload_logits_in_fresh_process(Path("cofi"), batch)
    torch.testing.assert_close(got, _eval_logits(method, batch), atol=1e-5, rtol=1e-5)
