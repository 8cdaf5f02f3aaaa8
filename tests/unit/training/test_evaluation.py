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


class ShapeRecorder(FirstTokenParity):
    def __init__(self):
        super().__init__()
        self.tokens = 0

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        self.tokens += input_ids.numel()
        return super().forward(input_ids, attention_mask, token_type_ids)


def test_predict_batches_rows_of_similar_length_and_answers_in_the_dataset_order():
    # lengths 1, 30, 1, 30, ...: in order every batch of 2 pads to 30; by length, only the long pairs do
    first = list(range(1, 13))
    data = datasets.Dataset.from_dict({"input_ids": [[t] + [5] * (29 * (i % 2)) for i, t in enumerate(first)],
                                       "labels": [t % 2 for t in first]})
    model = ShapeRecorder()
    logits, labels = predict(model, data, batch_size=2, device=torch.device("cpu"))
    assert model.tokens == 6 * 1 + 6 * 30  # 3 batches of two 1-token rows, 3 of two 30-token rows
    assert logits.argmax(1).tolist() == [t % 2 for t in first] and labels.tolist() == [t % 2 for t in first]
