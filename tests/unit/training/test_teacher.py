"""The teacher's fine-tuning settings, its log line, and what a diverged teacher tells the user."""

from __future__ import annotations

import pytest

from pipeline.config import spec_from_dict
from pipeline.training.teacher import progress_line, teacher_diverged_message, teacher_train_config

BASE = {"name": "t", "task": {"name": "synthetic", "source": "synthetic"},
        "teacher": {"model": "random", "architecture": {"num_layers": 2}, "tokenizer": {"vocab_size": 50},
                    "finetune": {"epochs": 3, "batch_size": 16, "learning_rate": 1.0e-4}},
        "train": {"epochs": 1, "batch_size": 8, "learning_rate": 5.0e-5, "grad_accumulation": 4, "max_grad_norm": 0.5},
        "methods": {"finetune": {}}}


def test_the_teacher_trains_with_its_own_finetune_settings_and_the_rest_of_train():
    spec = spec_from_dict(BASE)
    train = teacher_train_config(spec)
    assert (train.epochs, train.batch_size, train.learning_rate) == (3, 16, 1.0e-4)
    assert train.grad_accumulation == 1  # its batch is finetune.batch_size, whole
    assert train.max_grad_norm == 0.5  # from train:, like the students
    grouped = spec_from_dict({**BASE, "train": {**BASE["train"], "group_by_length": True}})
    assert teacher_train_config(grouped).group_by_length and not train.group_by_length


def test_the_log_line_lists_eval_metrics_in_order_and_the_message_names_the_field():
    line = progress_line({"step": 40.0, "eval/f1": 0.5, "eval/accuracy": 0.8125, "loss/task": 0.3, "eval/note": "x"})
    assert line == "teacher: step 40: accuracy 0.8125 f1 0.5000"
    message = teacher_diverged_message(spec_from_dict(BASE), "loss is nan at step 12")
    assert message == ("teacher: fine-tuning random diverged (loss is nan at step 12); "
                       "teacher.finetune.learning_rate is 0.0001: try a lower one")


def test_the_teachers_new_task_head_is_the_same_whatever_the_process_drew_before(tmp_path, monkeypatch):
    """A pretrained checkpoint has no head for the task: transformers draws it from torch's global
    generator as the model loads. The teacher's cache key says the spec and data decide its
    weights, so the stage seeds before loading: a notebook that drew random numbers first, and
    the CLI, fine-tune the same teacher."""
    from pathlib import Path

    import torch
    from transformers import BertConfig, BertModel

    from pipeline.config import load_spec
    from pipeline.prepare.stage import prepare
    from pipeline.training import teacher as teacher_module

    folder = tmp_path / "pretrained"
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)  # an encoder without any classifier
    root = Path(__file__).resolve().parents[3]
    spec = load_spec(root / "sweeps" / "smoke.yaml", [f"teacher.model={folder}", "teacher.architecture=null"])
    prepared = prepare(spec, tmp_path / "work")

    class Captured(Exception):
        pass

    heads = []

    def capture(method, **_):
        heads.append(method.ctx.load_pretrained().classifier.weight.detach().clone())
        raise Captured

    monkeypatch.setattr(teacher_module.loop, "run", capture)
    for draws in (0, 7):
        torch.manual_seed(draws)
        torch.rand(draws)
        with pytest.raises(Captured):
            teacher_module.finetune_teacher(spec, prepared, tmp_path / "work")
    assert torch.equal(heads[0], heads[1])
