"""The teacher's fine-tuning settings, its log line, and what a diverged teacher tells the user."""

from __future__ import annotations

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
