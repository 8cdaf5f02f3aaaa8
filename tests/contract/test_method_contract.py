"""Every registered method honours the contract of methods/base.py on a tiny random BERT.

`SETTINGS` names each method's tiny-model parameters; a registered method without an entry
fails `test_every_method_has_settings`, so no method goes untested unnoticed (composer's habit).
A new built-in method is its file in methods/, its line in the registry (`methods/__init__.py`;
tests/unit/methods/test_registry.py fails for a method file not registered) and its entry here.
"""

from __future__ import annotations

import dataclasses

import datasets
import pydantic
import pytest
import torch

from methods import get_method, registered_methods
from methods.base import MethodContext, Progress, StudentDefaults, TaskInfo, check_loss_terms, group_owner, logits_of
from pipeline.config import TrainConfig
from pipeline.training import loop
from pipeline.training.engine import Distributed, Engine, check_groups
from pipeline.training.export import count_parameters
from tests.conftest import make_batch, make_tiny_bert

# method -> parameters for a 4-layer, hidden-32 teacher (keep each method's steps cheap)
SETTINGS: dict[str, dict] = {
    "finetune": {"num_layers": 2},
    "kd": {"num_layers": 2, "alpha": 0.7, "temperature": 3.0},
    "theseus": {"num_layers": 2, "schedule": "constant", "base_rate": 0.5, "replacing_fraction": 0.5},
    "dcr": {"num_layers": 2, "schedule": "linear", "anneal_fraction": 0.5, "dfg_weight": 0.5},
    "pkd": {"num_layers": 3, "alpha": 0.7, "temperature": 5.0, "beta": 100.0, "layer_map": "skip"},
    # the longest path: a narrower random student (relation heads ≠ its heads), an assistant,
    # query/key relations; one step of unlabeled text per distillation phase
    "minilm": {
        "num_layers": 2, "hidden_size": 16, "num_heads": 2, "relation_heads": 4, "teacher_assistant": True,
        "query_key_relations": True, "distill_epochs": 0.25,
    },
    "cofi": {"distill_warmup_fraction": 0.2, "pruning_fraction": 0.5, "sparsity_warmup_fraction": 0.5, "target_sparsity": 0.5},
}

TASK = TaskInfo("tiny", 2, False, ("neg", "pos"))


@dataclasses.dataclass(frozen=True)
class _Task:
    name: str = "tiny"
    metrics: tuple = ("accuracy",)
    primary_metric: str = "accuracy"
    regression: bool = False
    num_labels: int = 2
    label_names: tuple = ("neg", "pos")


def tiny_dataset(n: int = 64, seed: int = 0, labels: bool = True) -> datasets.Dataset:
    batch = make_batch(batch_size=n, seq_len=12, seed=seed)
    cols = {
        "input_ids": [row[m.bool()].tolist() for row, m in zip(batch["input_ids"], batch["attention_mask"])],
        "attention_mask": [m[m.bool()].tolist() for m in batch["attention_mask"]],
        "token_type_ids": [[0] * int(m.sum()) for m in batch["attention_mask"]],
    }
    if labels:
        cols["labels"] = batch["labels"].tolist()
    return datasets.Dataset.from_dict(cols)


def make_method(name: str):
    teacher = make_tiny_bert(num_layers=4, seed=1)
    for p in teacher.parameters():
        p.requires_grad_(False)
    ctx = MethodContext(
        task=TASK, teacher=teacher, load_pretrained=lambda: make_tiny_bert(num_layers=4, seed=2),
        student=StudentDefaults(num_layers=2), learning_rate=1e-3, steps_per_epoch=4, unlabeled_steps_per_epoch=4,
    )
    return get_method(name)(SETTINGS[name], ctx), teacher


def test_every_method_has_settings():
    missing = [m for m in registered_methods() if m not in SETTINGS]
    assert not missing, f"add contract-test settings for {missing}"


@pytest.mark.parametrize("name", registered_methods())
def test_params_reject_unknown_keys(name):
    with pytest.raises(pydantic.ValidationError):
        get_method(name).Params.model_validate({"definitely_not_a_param": 1})


@pytest.mark.parametrize("name", registered_methods())
def test_each_phase_step_trains_its_groups_only(name):
    method, teacher = make_method(name)
    teacher_before = {k: v.clone() for k, v in teacher.state_dict().items()}
    method.build()
    plan = method.phases(8)
    assert plan and all(p.steps >= 0 for p in plan)
    train = TrainConfig(batch_size=8, learning_rate=1e-3, warmup_ratio=0.0, max_grad_norm=1.0)
    batch = make_batch(batch_size=8, seq_len=12, seed=3)
    for index, phase in enumerate(plan):
        method.start_phase(phase)
        groups = method.param_groups(phase)
        assert all(group_owner(g.name) in phase.trainable for g in groups), [g.name for g in groups]
        check_groups(groups, phase, method.model)
        trained = {id(p) for g in groups for p in g.params}
        before = {n: p.detach().clone() for n, p in method.model.named_parameters()}
        engine = Engine(method, groups, phase, train, Distributed(), micro_batch=8)
        progress = Progress(index, len(plan), phase.name, 0, max(1, phase.steps))
        method.on_step(progress)
        assert all(torch.equal(p, before[n]) for n, p in method.model.named_parameters()), "on_step changed a parameter"
        step_batch = {k: v for k, v in batch.items() if phase.data == "train" or k != "labels"}
        check_loss_terms(method.loss(step_batch, progress), name)  # no reserved name
        terms = engine.micro_step(step_batch, progress, 1.0)
        assert all(torch.isfinite(v) for v in terms.values()), terms
        engine.optimizer_step()
        changed = [n for n, p in method.model.named_parameters() if not torch.equal(p, before[n])]
        assert changed, f"phase {phase.name}: no parameter changed"
        for n, p in method.model.named_parameters():
            if id(p) not in trained:
                assert torch.equal(p, before[n]), f"phase {phase.name}: frozen {n} changed"
        method.after_optimizer_step(progress)  # may change any parameter (CoFi clamps its frozen masks too)
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, teacher_before[k]), f"the teacher's {k} changed"


@pytest.mark.parametrize("name", registered_methods())
def test_export_is_no_larger_and_reloads_with_equal_logits(name, tmp_path, tiny_tokenizer):
    from transformers import AutoModelForSequenceClassification

    from pipeline.training.export import save_student

    method, teacher = make_method(name)
    unlabeled = tiny_dataset(labels=False) if method.unlabeled() is not None else None
    loop.run(
        method, train_set=tiny_dataset(), dev={"dev": tiny_dataset(32, seed=1)}, task=_Task(),
        train=TrainConfig(max_steps=6, batch_size=8, learning_rate=1e-3, eval_every=3, progress_bar=False),
        seed=0, unlabeled_set=unlabeled,
    )
    batch = {k: v for k, v in make_batch(batch_size=4, seq_len=12, seed=5).items() if k != "labels"}
    eval_model = method.eval_model().eval()
    with torch.no_grad():
        expected = logits_of(eval_model(**batch))
    student = method.export()
    assert count_parameters(student)[0] <= count_parameters(teacher)[0]
    save_student(student, tiny_tokenizer, tmp_path / "student", TASK, {"method": name})
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "student", trust_remote_code=True).eval()
    with torch.no_grad():
        got = reloaded(**batch).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert reloaded.config.id2label == {0: "neg", 1: "pos"}


@pytest.mark.parametrize("name", registered_methods())
def test_state_dict_round_trip(name):
    method, _ = make_method(name)
    method.build()
    state = method.state_dict()
    other, _ = make_method(name)
    other.build()
    other.load_state_dict(state)
    batch = {k: v for k, v in make_batch(batch_size=2, seq_len=8).items() if k != "labels"}
    with torch.no_grad():
        a = logits_of(method.eval_model().eval()(**batch))
        b = logits_of(other.eval_model().eval()(**batch))
    torch.testing.assert_close(a, b)


def test_methods_never_import_ray_mlflow_or_deepspeed():
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2] / "methods"
    pattern = re.compile(r"^\s*(import|from)\s+(ray|mlflow|deepspeed)\b", re.M)
    offenders = [p.name for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert not offenders, f"methods/ must stay free of ray, mlflow and deepspeed: {offenders}"


@pytest.mark.parametrize("name", registered_methods())
def test_a_method_asking_for_unlabeled_text_declares_it(name):
    """The plan reads `uses_unlabeled_text` from the declaration, without the Method (so without
    torch): a method that overrides `unlabeled` and does not say so would be planned wrong."""
    from methods import get_declaration
    from methods.base import Method

    cls = get_method(name)
    assert (cls.unlabeled is not Method.unlabeled) == get_declaration(name).uses_unlabeled_text


def test_declarations_import_neither_torch_nor_transformers():
    """Their modules are what `drydock validate` imports (a fresh process checks it at run time:
    tests/unit/methods/test_registry.py); this names the file that breaks the rule."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2] / "methods"
    pattern = re.compile(r"^\s*(import|from)\s+(torch|transformers|methods\.(base|_bert|_l0|_losses|_pruned_bert|_replacing|_surgery))\b", re.M)
    files = [root / "declaration.py", *sorted((root / "params").glob("*.py"))]
    offenders = [p.name for p in files if pattern.search(p.read_text())]
    assert not offenders, f"declarations must import no torch: {offenders}"
