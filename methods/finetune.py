"""Fine-tuning: the teacher stage, and the truncated-student baseline every method must beat.

- Student: the bottom k encoder layers (plus embeddings and head) of the fine-tuned teacher by
  default — the stronger, fair baseline for Theseus, whose successors start the same way — or,
  with `init_from: pretrained`, of the pretrained checkpoint (the classic "BERT-k" baseline of the
  PKD paper). The teacher stage itself is this method with every layer of the pretrained model.
- One phase, all parameters trained with the task loss (cross-entropy; MSE for regression).
- Export: the student itself, a stock `BertForSequenceClassification` with k layers.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from methods._bert import num_layers, student_from_layers, student_layer_indices
from methods._losses import task_loss
from methods.base import Batch, Method, ParamGroup, Phase, Progress, decay_groups

# the Params name stays importable here: runs pickled before the split load it from this module
from methods.params.finetune import FinetuneDeclaration, FinetuneParams


class Finetune(FinetuneDeclaration, Method):

    params: FinetuneParams
    model: PreTrainedModel  # the student, from build() on (the other hooks run after it)

    def _source(self) -> PreTrainedModel:
        if self.params.init_from == "finetuned":
            if self.ctx.teacher is None:
                raise ValueError("finetune with init_from=finetuned needs the fine-tuned teacher")
            return self.ctx.teacher
        return self.ctx.load_pretrained()

    def build(self) -> PreTrainedModel:
        source = self._source()
        d = self.ctx.student
        layers = student_layer_indices(
            num_layers(source), self.params.num_layers, self.params.layers, d.num_layers, d.layers
        )
        self.model = student_from_layers(source, layers).train()
        return self.model

    def phases(self, total_steps: int) -> list[Phase]:
        return [Phase("finetune", total_steps, trainable=("student",))]

    def param_groups(self, phase: Phase) -> list[ParamGroup]:
        lr = self.params.learning_rate or self.ctx.learning_rate
        return decay_groups("student", self.model.named_parameters(), lr, self.ctx.weight_decay)

    def loss(self, batch: Batch, progress: Progress) -> dict[str, torch.Tensor]:
        logits = self.model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch.get("token_type_ids")
        ).logits
        return {"task": task_loss(logits, batch["labels"], self.ctx.task.regression)}

    def eval_model(self) -> nn.Module:
        return self.model

    def export(self) -> PreTrainedModel:
        return self.model
