"""Patient KD: layer maps, the three loss terms, and what reaches the student."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from methods._bert import encoder_layers, forward_hidden_states
from methods._losses import kd_loss, patience_loss
from methods.base import MethodContext, Progress, TaskInfo
from methods.pkd import PatientKD, PKDParams, cls_states, pkd_layer_map
from tests.conftest import make_batch, make_tiny_bert

PROGRESS = Progress(0, 1, "finetune", 0, 1)

# --------------------------------------------------------------------------------------------
# layer maps (0-based teacher indices; the paper's 1-based numbers in the comments)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "teacher, student, skip, last",
    [
        (12, 6, [1, 3, 5, 7, 9], [6, 7, 8, 9, 10]),  # skip 2,4,6,8,10; last 7..11
        (12, 3, [3, 7], [9, 10]),  # skip 4, 8; last 10, 11
        (6, 3, [1, 3], [3, 4]),  # skip 2, 4; last 4, 5
        (6, 2, [2], [4]),  # skip 3; last 5
        (4, 3, [0, 1], [1, 2]),  # L/m = 4/3: 1-based floor(4/3) = 1, floor(8/3) = 2
        (6, 1, [], []),  # a one-layer student has no intermediate layer
    ],
)
def test_skip_and_last_maps(teacher, student, skip, last):
    assert pkd_layer_map(teacher, student, "skip") == skip
    assert pkd_layer_map(teacher, student, "last") == last


def test_explicit_map_is_validated():
    assert pkd_layer_map(12, 3, [0, 10]) == [0, 10]
    with pytest.raises(ValueError, match="must give 2 teacher layers"):
        pkd_layer_map(12, 3, [1, 3, 5])
    with pytest.raises(ValueError, match=r"in \[0, 11\)"):
        pkd_layer_map(12, 3, [3, 11])  # the teacher's final layer is matched through the logits
    with pytest.raises(ValueError, match=r"in \[0, 11\)"):
        pkd_layer_map(12, 3, [-1, 3])
    with pytest.raises(ValueError, match="strictly increasing"):
        pkd_layer_map(12, 3, [7, 3])
    with pytest.raises(ValueError, match="strictly increasing"):
        pkd_layer_map(12, 3, [3, 3])
    with pytest.raises(ValueError, match="'skip', 'last'"):
        pkd_layer_map(12, 3, "middle")
    with pytest.raises(ValueError, match="does not fit"):
        pkd_layer_map(3, 6, "skip")


def test_params_accept_the_searched_scalars_and_explicit_lists():
    params = PKDParams.model_validate({"layer_map": "last", "beta": 10, "alpha": 0.2, "temperature": 20})
    assert params.layer_map == "last" and params.beta == 10.0
    assert PKDParams.model_validate({"layer_map": [1, 3]}).layer_map == [1, 3]
    defaults = PKDParams()
    assert (defaults.alpha, defaults.temperature, defaults.beta, defaults.layer_map, defaults.normalize) == (
        0.7, 10.0, 500.0, "skip", True,
    )
    with pytest.raises(ValidationError):
        PKDParams.model_validate({"layer_map": "middle"})
    with pytest.raises(ValidationError):
        PKDParams.model_validate({"beta": -1})


def test_cls_states_picks_position_zero_after_each_layer():
    states = [torch.full((2, 3, 4), float(i)) for i in range(5)]  # entry 0: embeddings
    for s in states:
        s[:, 1:] = -1.0  # non-[CLS] positions must not be picked
    picked = cls_states(states, [0, 2])
    assert picked.shape == (2, 2, 4)
    assert picked[:, 0].unique().tolist() == [1.0] and picked[:, 1].unique().tolist() == [3.0]


# --------------------------------------------------------------------------------------------
# the method
# --------------------------------------------------------------------------------------------


def make_pkd(params: dict, num_labels: int = 2, teacher_layers: int = 4):
    teacher = make_tiny_bert(num_layers=teacher_layers, num_labels=num_labels, seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    task = TaskInfo("t", num_labels, num_labels == 1)
    method = PatientKD(params, MethodContext(task=task, teacher=teacher, load_pretrained=make_tiny_bert))
    return method, teacher


def test_student_starts_from_the_fine_tuned_teachers_bottom_layers():
    method, teacher = make_pkd({"num_layers": 2})
    student = method.build()
    assert len(encoder_layers(student)) == 2
    for s_layer, t_layer in zip(encoder_layers(student), encoder_layers(teacher)[:2]):
        for (name, a), (_, b) in zip(s_layer.named_parameters(), t_layer.named_parameters()):
            assert torch.equal(a, b), name
    assert method.teacher_layers == [1]  # 4 -> 2, skip: 1-based 2


def test_loss_terms_match_the_formula():
    method, teacher = make_pkd({"num_layers": 3, "alpha": 0.3, "temperature": 5.0, "beta": 100.0, "layer_map": "last"})
    student = method.build().eval()  # no dropout, so the hand computation sees the same numbers
    with torch.no_grad():  # a tiny random BERT's logits are ~0.01: make the soft-target term large enough to check
        student.classifier.weight.mul_(300.0)
    batch = make_batch(seed=2)
    terms = method.loss(batch, PROGRESS)
    assert set(terms) == {"kd", "task", "patience"}
    s_states, s_logits = forward_hidden_states(student, batch)
    t_states, t_logits = forward_hidden_states(teacher, batch)
    assert method.teacher_layers == [1, 2]  # 4 -> 3, last: 1-based 2, 3
    # official src/KD_loss.py: nn.KLDivLoss() with its default 'mean', over batch x classes, times T²
    by_hand_kd = (F.softmax(t_logits / 5, -1) * (F.log_softmax(t_logits / 5, -1) - F.log_softmax(s_logits / 5, -1))).mean() * 25
    assert float(by_hand_kd) > 0.01
    torch.testing.assert_close(terms["kd"], 0.3 * by_hand_kd, atol=0, rtol=1e-5)
    torch.testing.assert_close(terms["kd"], 0.3 * kd_loss(s_logits, t_logits, 5.0, False) / s_logits.shape[-1], atol=0, rtol=1e-5)
    torch.testing.assert_close(terms["task"], 0.7 * F.cross_entropy(s_logits, batch["labels"]))
    # student layers 0, 1 against teacher layers 1, 2 at position 0, L2-normalised, mean over all
    s_cls = torch.stack([s_states[1][:, 0], s_states[2][:, 0]], dim=1)
    t_cls = torch.stack([t_states[2][:, 0], t_states[3][:, 0]], dim=1)
    by_hand = ((F.normalize(s_cls, dim=-1) - F.normalize(t_cls, dim=-1)) ** 2).mean()
    torch.testing.assert_close(terms["patience"], 100.0 * by_hand)
    torch.testing.assert_close(terms["patience"], 100.0 * patience_loss(s_cls, t_cls))


def test_every_term_is_zero_for_an_exact_copy_of_the_teacher():
    # a full-depth copy with the identity map: same logits (KD 0) and same [CLS] states (PT 0)
    method, _ = make_pkd({"num_layers": 4, "alpha": 1.0, "beta": 500.0, "layer_map": [0, 1, 2]})
    method.build().eval()
    terms = method.loss(make_batch(seed=3), PROGRESS)
    assert set(terms) == {"kd", "patience"}  # alpha = 1: no CE term
    # float32 rounding of the KL, times T² = 100
    assert float(terms["kd"].detach()) == pytest.approx(0.0, abs=1e-4)
    assert float(terms["patience"].detach()) == pytest.approx(0.0, abs=1e-6)


def test_patience_is_zero_when_the_student_layers_are_the_mapped_teacher_layers():
    # the bottom-3 student's intermediate layers 0, 1 are the teacher's layers 0, 1
    method, _ = make_pkd({"num_layers": 3, "layer_map": [0, 1]})
    method.build().eval()
    assert float(method.loss(make_batch(seed=4), PROGRESS)["patience"].detach()) == pytest.approx(0.0, abs=1e-9)
    # the same student against teacher layers 1, 2 is not a copy of them
    shifted, _ = make_pkd({"num_layers": 3, "layer_map": [1, 2]})
    shifted.build().eval()
    assert float(shifted.loss(make_batch(seed=4), PROGRESS)["patience"].detach()) > 1e-3


def test_padding_does_not_change_the_loss():
    method, _ = make_pkd({"num_layers": 2, "alpha": 0.5, "beta": 100.0})
    method.build().eval()
    batch = make_batch(seed=5)
    longer = {k: torch.cat([v, torch.zeros(v.shape[0], 3, dtype=v.dtype)], dim=1) if v.dim() == 2 else v for k, v in batch.items()}
    base, padded = method.loss(batch, PROGRESS), method.loss(longer, PROGRESS)
    for name in base:
        torch.testing.assert_close(padded[name], base[name], atol=1e-5, rtol=1e-5)


def test_gradients_reach_the_student_only_and_beta_zero_drops_the_term():
    method, teacher = make_pkd({"num_layers": 3, "beta": 10.0})
    student = method.build()
    terms = method.loss(make_batch(seed=6), PROGRESS)
    terms["patience"].backward()
    assert all(p.grad is None for p in teacher.parameters())
    # the patience term reaches the layers below the matched ones, not the last layer or head
    assert encoder_layers(student)[0].attention.self.query.weight.grad.abs().sum() > 0
    assert encoder_layers(student)[2].output.dense.weight.grad is None
    assert student.classifier.weight.grad is None

    no_patience, _ = make_pkd({"num_layers": 3, "beta": 0.0})
    no_patience.build()
    assert "patience" not in no_patience.loss(make_batch(seed=6), PROGRESS)


def test_regression_uses_mse_for_both_output_terms():
    method, teacher = make_pkd({"num_layers": 2, "alpha": 0.4, "beta": 1.0}, num_labels=1)
    student = method.build().eval()
    batch = make_batch(num_labels=1, seed=7)
    terms = method.loss(batch, PROGRESS)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    s, t = student(**inputs).logits, teacher(**inputs).logits
    torch.testing.assert_close(terms["kd"], 0.4 * F.mse_loss(s, t))
    torch.testing.assert_close(terms["task"], 0.6 * F.mse_loss(s.squeeze(-1), batch["labels"]))
    assert "patience" in terms
