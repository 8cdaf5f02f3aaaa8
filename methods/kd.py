"""Vanilla knowledge distillation (Hinton et al. 2015, arXiv 1503.02531) from the fine-tuned teacher.

- Student: the bottom k layers of the fine-tuned teacher (KD is sensitive to initialisation;
  starting from the teacher's layers is what PKD and Theseus compare against), or of the
  pretrained checkpoint with `init_from: pretrained`.
- Loss: (1 − alpha)·CE(student, labels) + alpha·T²·KL(softmax(z_t/T) || softmax(z_s/T)); for
  regression the soft term is the MSE between student and teacher outputs. Teacher logits are
  computed on the fly under no_grad (the teacher is frozen and in eval mode, no dropout).
- One phase; export: the student, a stock k-layer `BertForSequenceClassification`.
"""

from __future__ import annotations

import torch

from methods._losses import kd_loss, task_loss
from methods.base import Batch, Progress
from methods.finetune import Finetune

# the Params name stays importable here: runs pickled before the split load it from this module
from methods.params.kd import KDDeclaration, KDParams


class KnowledgeDistillation(KDDeclaration, Finetune):

    params: KDParams

    def loss(self, batch: Batch, progress: Progress) -> dict[str, torch.Tensor]:
        inputs = dict(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch.get("token_type_ids")
        )
        student_logits = self.model(**inputs).logits
        teacher = self.ctx.teacher
        assert teacher is not None  # needs_teacher: the pipeline always fetches it for kd
        with torch.no_grad():
            teacher_logits = teacher(**inputs).logits
        a, regression = self.params.alpha, self.ctx.task.regression
        terms = {"kd": a * kd_loss(student_logits, teacher_logits, self.params.temperature, regression)}
        if a < 1:
            terms["task"] = (1 - a) * task_loss(student_logits, batch["labels"], regression)
        return terms
