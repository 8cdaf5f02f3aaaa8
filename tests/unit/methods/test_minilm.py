"""MiniLM: relations from the last layer, students of any width, phases and their losses."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from methods._bert import embed, encoder_layers, run_layers
from methods._losses import (
    relation_log_probs,
    self_attention_relation_losses,
    split_relation_heads,
)
from methods.base import (
    MethodContext,
    Progress,
    StudentDefaults,
    TaskInfo,
    UnlabeledRequest,
)
from methods.minilm import MiniLM, MiniLMParams, last_layer_projections, student_shape
from tests.conftest import make_batch, make_tiny_bert


def distill_progress(phase: str = "distill") -> Progress:
    return Progress(0, 10, phase, 0, 5)


def unlabeled(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "labels"}


def make_minilm(params: dict, teacher=None, student: StudentDefaults | None = None, **ctx_kw):
    teacher = teacher if teacher is not None else make_tiny_bert(num_layers=4, seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    ctx = MethodContext(
        task=TaskInfo("t", 2, False), teacher=teacher, load_pretrained=make_tiny_bert, student=student or StudentDefaults(),
        **{"learning_rate": 1e-4, **ctx_kw},
    )
    return MiniLM(params, ctx), teacher


def same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


# --------------------------------------------------------------------------------------------
# relations from the last layer
# --------------------------------------------------------------------------------------------


def test_attention_relation_equals_the_layers_own_attention_probabilities():
    # eager attention returns its probabilities: the relation recomputed from the last layer's
    # query/key projections on its input must match them head by head (relation heads = heads)
    teacher = make_tiny_bert(num_layers=3, seed=4)
    teacher.set_attn_implementation("eager")
    batch = make_batch(seed=1)
    with torch.no_grad():
        hidden, mask = embed(teacher, batch)
        hidden = run_layers(encoder_layers(teacher)[:-1], hidden, mask)
        _, probabilities = encoder_layers(teacher)[-1].attention.self(hidden, mask)
        projections = last_layer_projections(teacher, batch)
    heads = teacher.config.num_attention_heads
    ours = relation_log_probs(
        split_relation_heads(projections["query"], heads), split_relation_heads(projections["key"], heads), batch["attention_mask"]
    ).exp()
    torch.testing.assert_close(ours, probabilities, atol=1e-6, rtol=1e-5)


def test_student_shape_defaults():
    assert student_shape(384, 12, 1536, None, None, None) == (384, 12, 1536)
    assert student_shape(384, 12, 1536, 192, None, None) == (192, 12, 768)  # d_k 16, FFN ratio kept
    assert student_shape(384, 12, 1536, 192, 6, 512) == (192, 6, 512)
    with pytest.raises(ValueError, match="not divisible"):
        student_shape(384, 12, 1536, 100, None, None)


# --------------------------------------------------------------------------------------------
# building the student
# --------------------------------------------------------------------------------------------


def test_a_student_of_the_teachers_shape_starts_from_its_bottom_layers():
    method, teacher = make_minilm({}, student=StudentDefaults(num_layers=2))
    model = method.build()
    student = model["student"]
    assert set(model) == {"student"}
    assert len(encoder_layers(student)) == 2
    for s_layer, t_layer in zip(encoder_layers(student), encoder_layers(teacher)):
        assert same_parameters(s_layer, t_layer)
    assert method.relation_heads == 4 and method.relations == ("attention", "value_relation")

    explicit, teacher = make_minilm({"layers": [1, 3]})
    assert same_parameters(encoder_layers(explicit.build()["student"])[1], encoder_layers(teacher)[3])


def test_a_narrower_student_is_random_from_the_teachers_config():
    method, teacher = make_minilm({"num_layers": 3, "hidden_size": 16}, student=StudentDefaults(num_layers=2))
    student = method.build()["student"]
    config = student.config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.intermediate_size) == (3, 16, 4, 32)
    assert config.vocab_size == teacher.config.vocab_size and config.num_labels == 2
    assert student.training and all(p.requires_grad for p in student.parameters())
    # the spec's student section supplies the width when the parameters do not
    from_spec, _ = make_minilm({}, student=StudentDefaults(num_layers=2, hidden_size=16, num_heads=2))
    config = from_spec.build()["student"].config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (2, 16, 2)


def test_invalid_configurations_are_refused():
    with pytest.raises(ValueError, match="teacher's shape"):
        make_minilm({"hidden_size": 16, "layers": [0, 1]})[0].build()
    with pytest.raises(ValueError, match="narrower"):
        make_minilm({"teacher_assistant": True})[0].build()
    # relation heads default to the teacher's 4: a width of 18 cannot be cut into 4
    with pytest.raises(ValueError, match="student's hidden size 18 cannot be split into 4"):
        make_minilm({"hidden_size": 18, "num_heads": 2})[0].build()
    with pytest.raises(ValueError, match="teacher's hidden size 32 cannot be split into 3"):
        make_minilm({"hidden_size": 24, "num_heads": 3, "relation_heads": 3})[0].build()


# --------------------------------------------------------------------------------------------
# phases
# --------------------------------------------------------------------------------------------


def test_unlabeled_request_comes_from_the_parameters():
    method, _ = make_minilm({"unlabeled_samples": 500, "unlabeled_files": ["wiki.txt", "books.txt"]})
    assert method.unlabeled() == UnlabeledRequest(max_samples=500, files=("wiki.txt", "books.txt"))
    assert make_minilm({})[0].unlabeled() == UnlabeledRequest(max_samples=None, files=())


def test_phases_distill_on_unlabeled_text_then_fine_tune():
    method, _ = make_minilm({"distill_epochs": 2.0}, steps_per_epoch=4, unlabeled_steps_per_epoch=5)
    method.build()
    distill, finetune = method.phases(30)
    assert (distill.name, distill.steps, distill.trainable, distill.data) == ("distill", 10, ("student",), "unlabeled")
    assert not distill.evaluate and not distill.select
    # fine-tuning keeps the trial's whole training budget, or takes its own epochs
    assert (finetune.name, finetune.steps, finetune.trainable, finetune.data) == ("finetune", 30, ("student",), "train")
    assert finetune.evaluate and finetune.select
    method, _ = make_minilm({"distill_epochs": 0.5, "finetune_epochs": 1.5}, steps_per_epoch=4, unlabeled_steps_per_epoch=5)
    method.build()
    assert [(p.name, p.steps) for p in method.phases(30)] == [("distill", 2), ("finetune", 6)]


def test_phases_with_a_teacher_assistant():
    params = {"hidden_size": 16, "teacher_assistant": True, "distill_epochs": 1.0}
    method, _ = make_minilm(params, steps_per_epoch=4, unlabeled_steps_per_epoch=5)
    model = method.build()
    assert len(encoder_layers(model["assistant"])) == 4 and model["assistant"].config.hidden_size == 16
    plan = method.phases(20)
    assert [(p.name, p.steps, p.trainable, p.data) for p in plan] == [
        ("assistant_distill", 5, ("assistant",), "unlabeled"),
        ("distill", 5, ("student",), "unlabeled"),
        ("finetune", 20, ("student",), "train"),
    ]
    method, _ = make_minilm({**params, "assistant_epochs": 3.0}, unlabeled_steps_per_epoch=5)
    method.build()
    assert method.phases(20)[0].steps == 15


def test_phases_need_the_unlabeled_set():
    method, _ = make_minilm({})
    method.build()
    with pytest.raises(ValueError, match="no unlabeled set"):
        method.phases(10)


def test_learning_rates_per_phase():
    method, _ = make_minilm({"distill_learning_rate": 5e-4, "learning_rate": 2e-5}, unlabeled_steps_per_epoch=3)
    model = method.build()
    distill, finetune = method.phases(10)
    groups = method.param_groups(distill)
    assert {g.name for g in groups} == {"student", "student.no_decay"}
    assert {g.lr for g in groups} == {5e-4}
    assert {g.lr for g in method.param_groups(finetune)} == {2e-5}
    assert sum(len(g.params) for g in groups) == len(list(model["student"].parameters()))
    default, _ = make_minilm({}, unlabeled_steps_per_epoch=3)  # both fall back to ctx's 1e-4
    default.build()
    assert {g.lr for p in default.phases(10) for g in default.param_groups(p)} == {1e-4}


# --------------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------------


def test_distill_loss_is_zero_for_an_exact_copy_of_the_teacher():
    method, _ = make_minilm({"num_layers": 4, "query_key_relations": True})
    method.build().eval()
    terms = method.loss(unlabeled(make_batch(seed=2)), distill_progress())
    assert set(terms) == {"attention", "value_relation", "query_relation", "key_relation"}
    for name, value in terms.items():
        assert float(value.detach()) == pytest.approx(0.0, abs=1e-9), name
    # a truncated student's last layer is the teacher's layer 1, not its layer 3 (a random tiny
    # BERT attends almost uniformly, hence the small but clearly non-zero values)
    truncated, _ = make_minilm({"num_layers": 2})
    truncated.build().eval()
    assert all(float(v.detach()) > 1e-5 for v in truncated.loss(unlabeled(make_batch(seed=2)), distill_progress()).values())


def test_distill_loss_matches_the_relations_of_both_last_layers():
    # teacher d_k 32 (hidden 64, 2 heads) against a student with d_k 16 (hidden 32, 2 heads)
    teacher = make_tiny_bert(num_layers=4, seed=3, hidden_size=64, num_heads=2, intermediate_size=128)
    method, _ = make_minilm({"num_layers": 2, "hidden_size": 32}, teacher=teacher)
    student = method.build().eval()["student"]
    assert student.config.num_attention_heads == 2 and method.relation_heads == 2
    batch = unlabeled(make_batch(seed=4))
    terms = method.loss(batch, distill_progress())
    with torch.no_grad():
        expected = self_attention_relation_losses(
            last_layer_projections(teacher, batch), last_layer_projections(student, batch), batch["attention_mask"], 2
        )
    for name in ("attention", "value_relation"):
        torch.testing.assert_close(terms[name].detach(), expected[name])
        assert float(expected[name]) > 0


def test_relation_heads_when_head_counts_differ():
    # teacher 4 heads of 8, student 2 heads of 8: 4 relation heads split the student's
    # concatenated projections into slices of 4, not into its own 2 heads
    method, teacher = make_minilm({"num_layers": 2, "hidden_size": 16, "num_heads": 2})
    student = method.build().eval()["student"]
    assert method.relation_heads == 4
    batch = unlabeled(make_batch(seed=5))
    terms = method.loss(batch, distill_progress())
    with torch.no_grad():
        own_heads = self_attention_relation_losses(
            last_layer_projections(teacher, batch), last_layer_projections(student, batch), batch["attention_mask"], 2
        )
        four = self_attention_relation_losses(
            last_layer_projections(teacher, batch), last_layer_projections(student, batch), batch["attention_mask"], 4
        )
    torch.testing.assert_close(terms["attention"].detach(), four["attention"])
    assert not torch.allclose(terms["attention"].detach(), own_heads["attention"])
    chosen, _ = make_minilm({"num_layers": 2, "hidden_size": 16, "num_heads": 2, "relation_heads": 2})
    chosen.build()
    assert chosen.relation_heads == 2


def test_padding_does_not_change_the_distill_loss():
    method, _ = make_minilm({"num_layers": 2, "hidden_size": 16})
    method.build().eval()
    batch = unlabeled(make_batch(seed=6))
    longer = {k: torch.cat([v, torch.zeros(v.shape[0], 4, dtype=v.dtype)], dim=1) for k, v in batch.items()}
    base, padded = method.loss(batch, distill_progress()), method.loss(longer, distill_progress())
    for name in base:
        torch.testing.assert_close(padded[name], base[name], atol=1e-6, rtol=1e-5)


def test_distill_gradients_reach_the_student_below_the_last_layers_attention_only():
    method, teacher = make_minilm({"num_layers": 2, "hidden_size": 16})
    student = method.build()["student"]
    sum(method.loss(unlabeled(make_batch(seed=7)), distill_progress()).values()).backward()
    last = encoder_layers(student)[-1]
    assert last.attention.self.query.weight.grad.abs().sum() > 0
    assert last.attention.self.value.weight.grad.abs().sum() > 0
    assert encoder_layers(student)[0].output.dense.weight.grad.abs().sum() > 0
    assert last.output.dense.weight.grad is None  # the last layer's output is not distilled
    assert student.classifier.weight.grad is None
    assert all(p.grad is None for p in teacher.parameters())


def test_finetune_phase_uses_the_labels():
    method, _ = make_minilm({"num_layers": 2})
    student = method.build().eval()["student"]
    batch = make_batch(seed=8)
    terms = method.loss(batch, Progress(5, 10, "finetune", 0, 5))
    logits = student(**unlabeled(batch)).logits
    assert set(terms) == {"task"}
    torch.testing.assert_close(terms["task"], torch.nn.functional.cross_entropy(logits, batch["labels"]))


def test_the_assistant_learns_from_the_teacher_then_teaches_the_student():
    params = {"num_layers": 4, "hidden_size": 16, "teacher_assistant": True}
    method, _ = make_minilm(params, unlabeled_steps_per_epoch=2)
    model = method.build()
    assistant, student = model["assistant"], model["student"]
    batch = unlabeled(make_batch(seed=9))

    assistant_phase, distill_phase, _ = method.phases(4)
    method.start_phase(assistant_phase)
    sum(method.loss(batch, distill_progress("assistant_distill")).values()).backward()
    assert encoder_layers(assistant)[-1].attention.self.query.weight.grad is not None
    assert all(p.grad is None for p in student.parameters())
    assistant.zero_grad(set_to_none=True)

    # entering the student's distillation copies the assistant's bottom layers into the student;
    # this 4-layer student is then an exact copy, so the relations agree
    method.start_phase(distill_phase)
    assert same_parameters(student, assistant)
    student.eval()
    terms = method.loss(batch, distill_progress("distill"))
    assert all(float(v.detach()) == pytest.approx(0.0, abs=1e-6) for v in terms.values())
    sum(terms.values()).backward()
    assert all(p.grad is None for p in assistant.parameters())  # the assistant is a frozen teacher now
    assert assistant.training  # its eval mode lasted only for computing targets


def test_params_reject_what_cannot_be_run():
    with pytest.raises(ValidationError):
        MiniLMParams.model_validate({"distill_epochs": 0})
    with pytest.raises(ValidationError):
        MiniLMParams.model_validate({"relation_heads": 0})


# --------------------------------------------------------------------------------------------
# shared distillation: distilled once, fine-tuned per seed
# --------------------------------------------------------------------------------------------


def test_shared_work_keys_the_distillation_and_not_the_fine_tuning():
    """pipeline/training/shared.py names the shared folder by this key (its tests run the loop)."""
    def work(params: dict, **ctx_kw):
        method, _ = make_minilm(params, student=StudentDefaults(num_layers=2), steps_per_epoch=4, unlabeled_steps_per_epoch=3,
                                **ctx_kw)
        return method.shared_work()

    assert work({}) is None  # off by default
    base = work({"share_distillation": True})
    assert base.produced_by == ("distill",)
    assert work({"share_distillation": True, "hidden_size": 16, "teacher_assistant": True}).produced_by == (
        "assistant_distill", "distill")
    assert base.key["params"]["distill_learning_rate"] == 1e-4  # unset: the learning rate distils
    # the fine-tuning does not count: its own learning rate (once the distillation's is explicit) and epochs
    assert work({"share_distillation": True, "distill_learning_rate": 1e-4, "learning_rate": 3e-4, "finetune_epochs": 2.0}).key == base.key
    # the distillation does: its parameters, the unlabeled set's size, the spec's defaults
    assert work({"share_distillation": True, "distill_epochs": 2.0}).key != base.key
    assert work({"share_distillation": True}, learning_rate=3e-4).key != base.key
    assert work({"share_distillation": True}, weight_decay=0.1).key != base.key
    assert base.key["steps_per_epoch"] == 3 and base.key["student"]["num_layers"] == 2


def test_shared_work_keys_the_unlabeled_files_by_their_contents_on_disk(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one text\n")
    method, _ = make_minilm({"share_distillation": True, "unlabeled_files": [str(corpus)]}, unlabeled_steps_per_epoch=3)
    before = method.shared_work().key
    assert before == method.shared_work().key
    corpus.write_text("one text\nand another\n")  # the same name, another corpus
    assert method.shared_work().key != before


def test_a_loaded_distillation_starts_the_student_and_leaves_its_phases_with_no_steps(tmp_path):
    from methods.minilm import STUDENT_FILE

    params = {"share_distillation": True, "num_layers": 2, "hidden_size": 16, "teacher_assistant": True}
    first, _ = make_minilm(params, steps_per_epoch=4, unlabeled_steps_per_epoch=5)
    first.build()
    with torch.no_grad():
        for p in first.model["student"].parameters():
            p.add_(0.5)  # "distilled"
    first.save_shared(tmp_path)
    assert [f.name for f in tmp_path.iterdir()] == [STUDENT_FILE]

    second, _ = make_minilm(params, steps_per_epoch=4, unlabeled_steps_per_epoch=5)
    second.build()
    assert [p.steps for p in second.phases(8)] == [5, 5, 8] and not same_parameters(second.model["student"], first.model["student"])
    second.load_shared(tmp_path)
    assert second.distilled == tmp_path / STUDENT_FILE
    assert same_parameters(second.model["student"], first.model["student"])
    assert [(p.name, p.steps) for p in second.phases(8)] == [("assistant_distill", 0), ("distill", 0), ("finetune", 8)]
    second.start_phase(second.phases(8)[1])  # the assistant does not overwrite a loaded student
    assert same_parameters(second.model["student"], first.model["student"])


def test_the_schedulers_time_axis_counts_only_the_labeled_fine_tuning():
    """ASHA stops a trial whose epoch reaches max_t (the spec's epochs): counted in, 6 distillation
    steps would put the first fine-tuning evaluation at epoch 1.0 of a 1-epoch run."""
    from pipeline.config import TrainConfig
    from pipeline.training import loop
    from tests.contract.test_method_contract import _Task, tiny_dataset

    teacher = make_tiny_bert(num_layers=4, seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    ctx = MethodContext(task=TaskInfo("t", 2, False), teacher=teacher, load_pretrained=make_tiny_bert,
                        student=StudentDefaults(num_layers=2), learning_rate=1e-3)
    method = MiniLM(MiniLMParams(distill_epochs=2.0), ctx)
    reporter = loop.LocalReporter()
    # 24 unlabeled rows at batch 8: 3 steps an epoch, 6 distillation steps; then 64 labeled rows: 8 steps
    train = TrainConfig(epochs=1, batch_size=8, learning_rate=1e-3, eval_every=2, warmup_ratio=0.0, progress_bar=False)
    result = loop.run(method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(16, seed=1)}, task=_Task(), train=train,
                      seed=0, reporter=reporter, unlabeled_set=tiny_dataset(24, seed=2))
    assert result.steps == 14
    assert [r["step"] for r in reporter.history] == [8, 10, 12, 14]
    assert [r.get("epoch") for r in reporter.history] == [0.25, 0.5, 0.75, None]
    assert [r.get("progress") for r in reporter.history] == [0.25, 0.5, 0.75, None]
    # the first report also carries the distillation's losses (6 steps), later ones only the labels'
    first, later = set(reporter.history[0]), set(reporter.history[1])
    assert {"loss/total", "loss/task"} <= later and not any(k.startswith("loss/") and "relation" in k for k in later)
    assert any(k.startswith("loss/") and "relation" in k for k in first), first
