"""BERT-of-Theseus on a tiny 4-layer teacher: modules, sampling, schedules, gradients, export."""

from __future__ import annotations

import pydantic
import pytest
import torch
import torch.nn.functional as F
from transformers import (
    AutoModelForSequenceClassification,
    BertForSequenceClassification,
)

from methods._bert import classify, embed, encoder_layers, run_layers
from methods._replacing import module_groups, successor_init_layers
from methods.base import MethodContext, Progress, StudentDefaults, TaskInfo
from methods.theseus import Theseus, TheseusParams, sample_successors
from tests.conftest import make_batch, make_tiny_bert

TASK = TaskInfo("tiny", 2, False, ("neg", "pos"))


def frozen_teacher(num_labels: int = 2):
    teacher = make_tiny_bert(num_layers=4, num_labels=num_labels, seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    teacher.classifier.weight.mul_(50)  # logits of order 1, so that differences between models show
    return teacher


TWO_LAYERS = StudentDefaults(num_layers=2)


def make_theseus(teacher=None, task: TaskInfo = TASK, student: StudentDefaults = TWO_LAYERS, **params) -> Theseus:
    ctx = MethodContext(
        task=task, teacher=teacher or frozen_teacher(), load_pretrained=lambda: None, student=student
    )
    method = Theseus(params, ctx)
    method.build()
    return method


def inputs_of(batch):
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def step(method: Theseus, step: int, total: int) -> dict[str, float]:
    return method.on_step(Progress(step, total, "replacing", step, total))


# -- modules ----------------------------------------------------------------------------------


def test_uniform_splits():
    assert module_groups(12, 6) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert module_groups(6, 3) == [[0, 1], [2, 3], [4, 5]]
    assert module_groups(6, 2) == [[0, 1, 2], [3, 4, 5]]
    assert module_groups(6, 4) == [[0, 1], [2, 3], [4], [5]]  # uneven: larger modules at the bottom


def test_explicit_split_and_invalid_splits():
    assert module_groups(6, 3, [3, 2, 1]) == [[0, 1, 2], [3, 4], [5]]
    with pytest.raises(ValueError, match="cover every one of the teacher's 6 layers exactly once"):
        module_groups(6, 3, [3, 2, 2])
    with pytest.raises(ValueError, match="cover every one"):
        module_groups(6, 3, [4, 2, 0])
    with pytest.raises(ValueError, match="has 2 modules but the student has 3"):
        module_groups(6, 3, [3, 3])
    with pytest.raises(ValueError, match="cannot split a 4-layer teacher into 5"):
        module_groups(4, 5)


def test_successor_init_options():
    groups = module_groups(6, 3)
    assert successor_init_layers(groups, "bottom") == [0, 1, 2]
    assert successor_init_layers(groups, "top") == [3, 4, 5]
    assert successor_init_layers(groups, "every_kth") == [1, 3, 5]
    assert successor_init_layers(module_groups(6, 3, [3, 2, 1]), "every_kth") == [2, 4, 5]


def test_non_uniform_split_is_honoured_in_the_model():
    teacher = frozen_teacher()
    method = make_theseus(teacher, split=[2, 1, 1])
    model = method.model
    assert model.groups == ((0, 1), (2,), (3,))
    assert [len(module) for module in model.predecessors] == [2, 1, 1]
    assert model.student.config.num_hidden_layers == 3
    teacher_layers = encoder_layers(teacher)
    for group, module in zip(model.groups, model.predecessors):
        for index, layer in zip(group, module):
            for (name, p), q in zip(layer.named_parameters(), teacher_layers[index].parameters()):
                assert torch.equal(p, q), name
    # successors start as the bottom three teacher layers
    for successor, source in zip(model.successors, teacher_layers[:3]):
        assert all(torch.equal(p, q) for p, q in zip(successor.parameters(), source.parameters()))


def test_invalid_split_is_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="cover every one of the teacher's 4 layers exactly once"):
        make_theseus(split=[2, 1])
    with pytest.raises(pydantic.ValidationError, match="number of modules disagrees"):
        TheseusParams(num_layers=3, split=[2, 2])
    with pytest.raises(pydantic.ValidationError):
        TheseusParams(split=[2, 0, 2])


def test_init_top_and_spec_defaults():
    teacher = frozen_teacher()
    top = make_theseus(teacher, init="top")
    assert torch.equal(top.model.successors[0].output.dense.weight, encoder_layers(teacher)[2].output.dense.weight)
    explicit = make_theseus(teacher, student=StudentDefaults(layers=(0, 3)))
    assert torch.equal(explicit.model.successors[1].output.dense.weight, encoder_layers(teacher)[3].output.dense.weight)
    with pytest.raises(pydantic.ValidationError, match="either layers or init"):
        TheseusParams(layers=[0, 1], init="top")


# -- the hybrid forward -----------------------------------------------------------------------


def test_all_predecessors_equal_the_teacher_and_all_successors_the_student():
    teacher = frozen_teacher()
    model = make_theseus(teacher).model.eval()
    inputs = inputs_of(make_batch(seed=2))
    with torch.no_grad():
        teacher_logits = teacher(**inputs).logits
        student_logits = model.student(**inputs).logits
        torch.testing.assert_close(model(**inputs, use_successor=[False, False]), teacher_logits, rtol=0, atol=1e-5)
        torch.testing.assert_close(model(**inputs, use_successor=[True, True]), student_logits, rtol=0, atol=1e-5)
        assert (teacher_logits - student_logits).abs().max() > 1e-2  # the two really differ


def test_mixed_choice_runs_successor_then_predecessor():
    teacher = frozen_teacher()
    model = make_theseus(teacher).model.eval()
    inputs = inputs_of(make_batch(seed=2))
    with torch.no_grad():
        hidden, mask = embed(teacher, inputs)
        hidden = encoder_layers(teacher)[0](hidden, mask)  # successor 0 starts as teacher layer 0
        hidden = run_layers(encoder_layers(teacher)[2:4], hidden, mask)  # predecessor module 1
        expected = classify(teacher, hidden)
        torch.testing.assert_close(model(**inputs, use_successor=[True, False]), expected, rtol=0, atol=1e-5)


# -- sampling ---------------------------------------------------------------------------------


def test_empirical_successor_fraction_matches_p():
    torch.manual_seed(0)
    draws = torch.tensor([sample_successors(6, 0.3) for _ in range(4000)], dtype=torch.float)
    assert draws.mean().item() == pytest.approx(0.3, abs=0.01)  # 24,000 draws: 4 standard errors
    assert draws.mean(0).sub(0.3).abs().max().item() < 0.03  # every module alike
    assert sample_successors(4, 0.0) == [False] * 4
    assert sample_successors(4, 1.0) == [True] * 4


def test_loss_draws_one_decision_per_module_at_the_scheduled_rate():
    method = make_theseus(schedule="constant", base_rate=0.7, replacing_steps=1000)
    assert step(method, 0, 2000) == {"replacement_rate": 0.7}
    seen: list[list[bool]] = []

    def spy(*args, use_successor, **kwargs):  # records the decisions; the forward itself is tested above
        seen.append(list(use_successor))
        return torch.zeros(2, 2, requires_grad=True)

    method.model.forward = spy
    torch.manual_seed(0)
    batch = make_batch(batch_size=2, seq_len=6)
    for _ in range(300):
        method.loss(batch, Progress(0, 2000, "replacing", 0, 1000))
    fraction = torch.tensor(seen, dtype=torch.float).mean().item()
    assert fraction == pytest.approx(0.7, abs=0.06)  # 600 draws: about 3 standard errors


# -- gradients --------------------------------------------------------------------------------


def test_gradients_reach_successors_below_an_active_predecessor():
    method = make_theseus()
    model = method.model
    batch = make_batch()
    logits = model(**inputs_of(batch), use_successor=[True, False])
    F.cross_entropy(logits, batch["labels"]).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.successors[0].parameters() if p.dim() == 2)
    assert all(p.grad is None for p in model.successors[1].parameters())
    assert all(p.grad is None for p in model.predecessors.parameters())
    assert all(not p.requires_grad for p in model.predecessors.parameters())
    assert all(not p.requires_grad for n, p in model.student.named_parameters() if ".encoder." not in f".{n}")


def test_idle_successors_get_zero_gradients_even_when_no_successor_ran():
    method = make_theseus(schedule="constant", base_rate=0.0, replacing_steps=10)
    assert step(method, 0, 20) == {"replacement_rate": 0.0}
    terms = method.loss(make_batch(), Progress(0, 20, "replacing", 0, 10))
    terms["task"].backward()
    for p in method.model.successors.parameters():
        assert p.grad is not None and torch.count_nonzero(p.grad) == 0


def test_predecessors_embeddings_and_head_never_change():
    teacher = frozen_teacher()
    teacher_before = {k: v.clone() for k, v in teacher.state_dict().items()}
    method = make_theseus(teacher, schedule="constant", base_rate=0.5, replacing_steps=4)
    model = method.model
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    successors_before = [p.detach().clone() for p in model.successors.parameters()]
    groups = method.param_groups(method.phases(8)[0])
    optimizer = torch.optim.AdamW([{"params": g.params, "lr": 1e-2, "weight_decay": g.weight_decay} for g in groups])
    torch.manual_seed(3)
    for t in range(6):
        step(method, t, 8)
        optimizer.zero_grad()
        sum(method.loss(make_batch(seed=t), Progress(t, 8, "replacing", t, 4)).values()).backward()
        optimizer.step()
    assert {n for n in frozen_before} >= {n for n, _ in model.predecessors.named_parameters(prefix="predecessors")}
    for n, p in model.named_parameters():
        if n in frozen_before:
            assert torch.equal(p, frozen_before[n]), n
    assert all(not torch.equal(p, q) for p, q in zip(model.successors.parameters(), successors_before))
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, teacher_before[k]), k


# -- schedules and phases ---------------------------------------------------------------------


def test_curriculum_is_one_phase_and_never_runs_predecessors_once_p_is_one():
    method = make_theseus(schedule="linear", base_rate=0.3, replacing_fraction=0.25)
    assert [(p.name, p.steps) for p in method.phases(40)] == [("replacing", 40)]
    assert step(method, 0, 40)["replacement_rate"] == pytest.approx(0.3)
    assert step(method, 5, 40)["replacement_rate"] == pytest.approx(0.65)
    assert step(method, 10, 40) == {"replacement_rate": 1.0}
    calls = []
    original = method.model.run_predecessor
    method.model.run_predecessor = lambda *a: calls.append(a) or original(*a)
    torch.manual_seed(0)
    for t in range(10, 40, 6):
        step(method, t, 40)
        method.loss(make_batch(batch_size=2, seq_len=6, seed=t), Progress(t, 40, "replacing", t, 40))
    assert calls == []


def test_constant_and_anti_curriculum_end_in_successor_finetuning():
    constant = make_theseus(schedule="constant", base_rate=0.7, replacing_fraction=0.25)
    assert [(p.name, p.steps) for p in constant.phases(40)] == [("replacing", 10), ("successor_finetune", 30)]
    assert [step(constant, t, 40)["replacement_rate"] for t in (0, 9, 10, 39)] == [0.7, 0.7, 1.0, 1.0]
    anti = make_theseus(schedule="anti_curriculum", base_rate=0.3, slope=0.07)  # R = 10 steps
    assert [(p.name, p.steps) for p in anti.phases(40)] == [("replacing", 10), ("successor_finetune", 30)]
    rates = [step(anti, t, 40)["replacement_rate"] for t in (0, 5, 9, 10, 39)]
    assert rates == pytest.approx([0.7, 0.35, 0.07, 1.0, 1.0])
    long = make_theseus(schedule="constant", replacing_steps=100)
    assert [(p.name, p.steps) for p in long.phases(40)] == [("replacing", 40)]
    assert all(p.trainable == ("successors",) and p.select for p in constant.phases(40))


def test_schedule_parameters_are_validated():
    with pytest.raises(pydantic.ValidationError, match="either slope or replacing_steps"):
        TheseusParams(slope=0.01, replacing_steps=10)
    with pytest.raises(pydantic.ValidationError, match="slope applies to the linear and anti_curriculum"):
        TheseusParams(schedule="constant", slope=0.01)
    with pytest.raises(pydantic.ValidationError):
        TheseusParams(base_rate=1.5)


def test_regression_uses_mse():
    method = make_theseus(frozen_teacher(num_labels=1), task=TaskInfo("stsb", 1, True), schedule="linear", base_rate=1.0)
    method.model.eval()
    step(method, 0, 10)
    batch = make_batch(num_labels=1)
    loss = method.loss(batch, Progress(0, 10, "replacing", 0, 10))["task"]
    with torch.no_grad():
        expected = F.mse_loss(method.model.student(**inputs_of(batch)).logits.squeeze(-1), batch["labels"])
    torch.testing.assert_close(loss.detach(), expected)


# -- evaluation, export, state ----------------------------------------------------------------


def test_export_equals_the_pure_successor_hybrid(tmp_path):
    method = make_theseus()
    with torch.no_grad():  # move the successors away from their teacher-layer initialisation
        for p in method.model.successors.parameters():
            p.add_(0.01 * torch.randn_like(p))
    inputs = inputs_of(make_batch(seed=4))
    method.model.eval()
    with torch.no_grad():
        hybrid = method.model(**inputs, use_successor=[True, True])
        assert method.eval_model() is method.model.student
        exported = method.export()
        assert type(exported) is BertForSequenceClassification
        assert exported.config.num_hidden_layers == 2 and len(encoder_layers(exported)) == 2
        torch.testing.assert_close(exported(**inputs).logits, hybrid, rtol=0, atol=1e-5)
        exported.save_pretrained(tmp_path / "student")
        reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "student").eval()
        torch.testing.assert_close(reloaded(**inputs).logits, hybrid, rtol=0, atol=1e-5)


def test_state_dict_holds_the_student_only_and_restores_it():
    method = make_theseus()
    state = method.state_dict()
    assert set(state) == {"student"}
    with torch.no_grad():
        for p in method.model.successors.parameters():
            p.zero_()
    method.load_state_dict(state)
    assert torch.equal(method.model.successors[0].output.dense.weight, state["student"]["bert.encoder.layer.0.output.dense.weight"])
