"""Dev-set evaluation: logits in the dataset's order, metrics named by split."""

from __future__ import annotations

import datasets
import torch
from torch import nn

from pipeline.prepare.tasks import GLUE
from pipeline.training.evaluation import evaluate, predict


class FirstTokenParity(nn.Module):
    """Predicts class 1 when the first token id is odd: known answers for known rows."""

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        odd = (input_ids[:, 0] % 2).float()
        return torch.stack([1 - odd, odd], dim=1)


def rows(first_tokens: list[int], labels: list[int]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"input_ids": [[t, 5, 6][: 1 + i % 3] for i, t in enumerate(first_tokens)],
                                       "attention_mask": [[1] * (1 + i % 3) for i in range(len(first_tokens))],
                                       "labels": labels})


def test_predict_keeps_the_order_across_batches_and_restores_training_mode():
    model = FirstTokenParity().train()
    logits, labels = predict(model, rows([1, 2, 3, 4, 5], [1, 0, 0, 0, 1]), batch_size=2, device=torch.device("cpu"))
    assert logits.argmax(1).tolist() == [1, 0, 1, 0, 1] and labels.tolist() == [1, 0, 0, 0, 1]
    assert model.training


def test_metrics_are_named_eval_for_dev_and_after_the_split_otherwise():
    task = GLUE["rte"]  # accuracy, two classes
    dev = {"dev": rows([1, 2, 3, 4], [1, 0, 0, 0]), "dev_mismatched": rows([1, 3], [1, 1])}
    assert evaluate(FirstTokenParity(), dev, task, batch_size=3, device=torch.device("cpu")) == {
        "eval/accuracy": 0.75, "eval_mismatched/accuracy": 1.0}
