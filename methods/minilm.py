"""MiniLM deep self-attention distillation (Wang et al. 2020, arXiv 2002.10957), with the relation
heads and query/key relations of MiniLMv2 (arXiv 2012.15828), run per task.

MiniLM is a **pre-training-stage** (task-agnostic) method in the paper: the student is distilled
once on a large general corpus and then fine-tuned on each task. drydock runs it **per task**:
the distillation text is the task's own training text with its labels unused, unless
`unlabeled_files` supplies a general corpus (one text per line). The authors never released
the distillation code (only checkpoints), so the loss follows the papers' equations.

- Student: any depth and width (e.g. 3×384, 6×192). When its layer shape (hidden size, heads,
  intermediate size) equals the teacher's it starts from the teacher's bottom layers (or explicit
  `layers`) with the teacher's embeddings and head; otherwise it is initialised randomly from the
  teacher's config with the student's shape (`student_from_config`). Unset shape fields come from
  the spec's `student:` section, then the teacher (heads: the teacher's count, so d_k shrinks
  with the width; intermediate size: the teacher's, scaled with the width).
- Loss, on the **last** layer only, unweighted: L_AT + L_VR, where L_AT = KL(teacher || student)
  of the attention distributions softmax(Q·Kᵀ/√d_k) and L_VR the same for the value relations
  softmax(V·Vᵀ/√d_k), each averaged over heads and real query positions, padding masked out
  (`methods._losses.self_attention_relation_losses`). Q, K, V are recomputed from the last
  layer's query/key/value projections on that layer's input, since the stock layer does not
  return attention probabilities. Relations are |x|×|x| whatever d_k is, so widths may differ.
- Relation heads (MiniLMv2): both sides' concatenated Q, K, V are split into `relation_heads`
  heads (default: the teacher's head count). With equal head counts on both sides this is
  exactly MiniLM v1's per-head attention; with different counts it is v2's relation heads.
  `query_key_relations` adds v2's query–query and key–key relations (v2 itself uses Q-Q, K-K,
  V-V without Q-K; here they are added to v1's terms).
- Phases:
    1. optional `assistant_distill` (`teacher_assistant: true`, MiniLM v1): a random-init
       assistant of the teacher's depth and the student's width learns the teacher's last-layer
       relations for `assistant_epochs` (default `distill_epochs`) epochs of the unlabeled set;
    2. `distill`: the student learns the last-layer relations of the teacher (or of the
       assistant, after copying the assistant's bottom layers, which have the student's width)
       for `distill_epochs` epochs of the unlabeled set, labels unused; no dev evaluation;
    3. `finetune`: cross-entropy (MSE for regression) on the labels, for `finetune_epochs`
       epochs of the labeled set, or by default the trial's whole training budget
       (`train.epochs` / `train.max_steps`).
  The distillation phases therefore come on top of the training budget every other method gets
  for its labeled training, like the paper's separate distillation stage: a trial runs more
  optimizer steps than `train.max_steps` by the distillation steps.
  Distillation uses `distill_learning_rate` (default: the learning rate), fine-tuning
  `learning_rate` (default: train.learning_rate).
- `share_distillation: true` distils once and fine-tunes many times, as the paper does: the
  first trial with a given distillation (same teacher, data, unlabeled text, student shape and
  distillation parameters; not the seed, nor the fine-tuning rate or epochs) saves its distilled
  student in `<workdir>/cache/methods/minilm-<key>/`; every later trial loads it and keeps the
  distillation phases with no steps. A trial that finds another distilling waits for it instead
  of distilling the same student again; under DDP rank 0 decides for all ranks. The method only
  declares the work (`shared_work`: the key and the producing phases) and writes or reads the
  student (`save_shared`, `load_shared`); the folder, the lock and the broadcast are the
  pipeline's (`pipeline/training/shared.py`). The distilled student then carries the first
  trial's seed: seeds vary only the fine-tuning.
- Unlabeled text: the task's training split (a seeded subsample of `unlabeled_samples` texts
  when set; `max_train_samples` does not apply) plus every line of `unlabeled_files`; the loop
  streams it without labels.
- Export: the student, a stock `BertForSequenceClassification` of the student's shape.

Where drydock differs: per-task instead of general-corpus distillation (above); the assistant's
bottom layers initialise the student after the assistant phase (the paper does not say how the
student starts); the query–query/key–key terms are added to v1's instead of replacing them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from transformers import PreTrainedModel

from methods._bert import (
    embed,
    encoder_layers,
    num_layers,
    run_layers,
    student_from_config,
    student_from_layers,
    student_layer_indices,
)
from methods._losses import self_attention_relation_losses, task_loss
from methods.base import (
    Batch,
    Method,
    ParamGroup,
    Phase,
    Progress,
    SharedWork,
    UnlabeledRequest,
    decay_groups,
)

# the Params name stays importable here: runs pickled before the split load it from this module
from methods.params.minilm import MiniLMDeclaration, MiniLMParams

DISTILL_PHASES = ("assistant_distill", "distill")
STUDENT_FILE = "student.pt"  # the distilled student's state, in its shared folder


def last_layer_projections(model: PreTrainedModel, batch: Batch) -> dict[str, torch.Tensor]:
    """The last encoder layer's concatenated queries, keys and values, (batch, length, width):
    its own query/key/value projections applied to its input hidden state."""
    hidden, mask = embed(model, batch)
    layers = encoder_layers(model)
    hidden = run_layers(layers[:-1], hidden, mask)
    last: Any = layers[-1]  # a BERT-style layer; its submodules are looked up by name
    attention = last.attention.self
    return {"query": attention.query(hidden), "key": attention.key(hidden), "value": attention.value(hidden)}


def student_shape(
    teacher_hidden: int,
    teacher_heads: int,
    teacher_intermediate: int,
    hidden_size: int | None,
    num_heads: int | None,
    intermediate_size: int | None,
) -> tuple[int, int, int]:
    """(hidden size, heads, intermediate size) of the student; unset fields follow the teacher,
    the intermediate size scaled with the width so the FFN keeps the teacher's ratio."""
    hidden = hidden_size or teacher_hidden
    heads = num_heads or teacher_heads
    intermediate = intermediate_size or teacher_intermediate * hidden // teacher_hidden
    if hidden % heads:
        raise ValueError(f"student hidden size {hidden} is not divisible by its {heads} heads")
    return hidden, heads, intermediate


def epochs_to_steps(epochs: float, steps_per_epoch: int) -> int:
    return max(1, round(epochs * steps_per_epoch))


@contextmanager
def frozen_eval(module: nn.Module) -> Iterator[nn.Module]:
    """Eval mode and no_grad while a module serves as a teacher (the assistant is otherwise in
    train mode with the rest of the trainable module; dropout would make its targets noisy)."""
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            yield module
    finally:
        module.train(was_training)


class MiniLM(MiniLMDeclaration, Method):

    params: MiniLMParams
    model: nn.ModuleDict  # "student", and "assistant" with teacher_assistant
    relation_heads: int
    relations: tuple[str, ...]
    distilled: Path | None = None  # the shared distilled student this trial loaded (share_distillation)

    def unlabeled(self) -> UnlabeledRequest:
        return UnlabeledRequest(max_samples=self.params.unlabeled_samples, files=tuple(self.params.unlabeled_files))

    def build(self) -> nn.Module:
        teacher = self.ctx.teacher
        if teacher is None:
            raise ValueError("minilm needs the fine-tuned teacher")
        p, d, config = self.params, self.ctx.student, teacher.config
        shape = student_shape(
            config.hidden_size,
            config.num_attention_heads,
            config.intermediate_size,
            p.hidden_size or d.hidden_size,
            p.num_heads or d.num_heads,
            p.intermediate_size or d.intermediate_size,
        )
        same_shape = shape == (config.hidden_size, config.num_attention_heads, config.intermediate_size)
        if p.layers is not None and not same_shape:
            raise ValueError("minilm layers only applies to a student of the teacher's shape (its layers are copied)")
        if p.teacher_assistant and same_shape:
            raise ValueError("minilm teacher_assistant needs a student narrower than the teacher")
        layers = student_layer_indices(num_layers(teacher), p.num_layers, p.layers, d.num_layers, d.layers)
        if same_shape:
            student = student_from_layers(teacher, layers)
        else:
            student = student_from_config(teacher, len(layers), *shape)
        modules = {"student": student.train()}
        if p.teacher_assistant:
            modules["assistant"] = student_from_config(teacher, num_layers(teacher), *shape).train()

        self.relation_heads = p.relation_heads or config.num_attention_heads
        for who, width in (("teacher", config.hidden_size), ("student", shape[0])):
            if width % self.relation_heads:
                raise ValueError(f"the {who}'s hidden size {width} cannot be split into {self.relation_heads} relation heads")
        self.relations = ("attention", "value_relation")
        if p.query_key_relations:
            self.relations += ("query_relation", "key_relation")
        self.model = nn.ModuleDict(modules)
        return self.model

    # --- shared distillation ------------------------------------------------------------------

    def shared_work(self) -> SharedWork | None:
        if not self.params.share_distillation:
            return None
        produced_by = DISTILL_PHASES if self.params.teacher_assistant else ("distill",)
        return SharedWork(key=self._distillation_key(), produced_by=produced_by)

    def _distillation_key(self) -> dict[str, Any]:
        """Everything the distilled student depends on, and nothing the fine-tuning does: not the
        seed, the fine-tuning learning rate or epochs (the paper's one distillation, fine-tuned
        per task and seed). The unlabeled files count by name, size and modification time."""
        p, ctx = self.params, self.ctx
        distill = p.model_dump(
            mode="json",
            include={"num_layers", "layers", "hidden_size", "num_heads", "intermediate_size", "relation_heads",
                     "query_key_relations", "teacher_assistant", "distill_epochs", "assistant_epochs",
                     "unlabeled_samples", "unlabeled_files", "distill_learning_rate"},
        )
        if p.distill_learning_rate is None:
            distill["distill_learning_rate"] = p.learning_rate or ctx.learning_rate
        files = [(f, os.path.getsize(f), os.path.getmtime(f)) for f in p.unlabeled_files]
        return {
            "params": distill, "files": files, "student": ctx.student.__dict__,
            "steps_per_epoch": ctx.unlabeled_steps_per_epoch, "weight_decay": ctx.weight_decay,
            "warmup_ratio": ctx.warmup_ratio,
        }

    def save_shared(self, folder: Path) -> None:
        torch.save(self.model["student"].state_dict(), folder / STUDENT_FILE)

    def load_shared(self, folder: Path) -> None:
        self.model["student"].load_state_dict(torch.load(folder / STUDENT_FILE, map_location="cpu", weights_only=True))
        self.distilled = folder / STUDENT_FILE

    def phases(self, total_steps: int) -> list[Phase]:
        per_epoch = self.ctx.unlabeled_steps_per_epoch
        if per_epoch <= 0:
            raise ValueError("minilm distils on unlabeled text, but the loop was given no unlabeled set")
        p = self.params
        # A shared distillation already done leaves its phases in the plan with no steps, so a
        # resumed trial finds its phases where its checkpoint says they were.
        reused = self.distilled is not None
        plan = []
        if p.teacher_assistant:
            steps = 0 if reused else epochs_to_steps(p.assistant_epochs or p.distill_epochs, per_epoch)
            plan.append(Phase("assistant_distill", steps, ("assistant",), data="unlabeled", evaluate=False, select=False))
        steps = 0 if reused else epochs_to_steps(p.distill_epochs, per_epoch)
        plan.append(Phase("distill", steps, ("student",), data="unlabeled", evaluate=False, select=False))
        finetune_steps = total_steps if p.finetune_epochs is None else epochs_to_steps(p.finetune_epochs, self.ctx.steps_per_epoch)
        plan.append(Phase("finetune", finetune_steps, ("student",)))
        return plan

    def start_phase(self, phase: Phase) -> None:
        if phase.name == "distill" and "assistant" in self.model and self.distilled is None:
            student = self._part("student")
            start = student_from_layers(self._part("assistant"), list(range(num_layers(student))))
            student.load_state_dict(start.state_dict())

    def param_groups(self, phase: Phase) -> list[ParamGroup]:
        (trained,) = phase.trainable
        learning_rate = self.params.learning_rate or self.ctx.learning_rate
        if phase.data == "unlabeled":
            learning_rate = self.params.distill_learning_rate or learning_rate
        return decay_groups(trained, self.model[trained].named_parameters(), learning_rate, self.ctx.weight_decay)

    def loss(self, batch: Batch, progress: Progress) -> dict[str, torch.Tensor]:
        if progress.phase not in DISTILL_PHASES:
            logits = self.model["student"](
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch.get("token_type_ids")
            ).logits
            return {"task": task_loss(logits, batch["labels"], self.ctx.task.regression)}
        if progress.phase == "assistant_distill":
            source, learner = self.ctx.teacher, self._part("assistant")
        else:
            source, learner = self._part("assistant") if "assistant" in self.model else self.ctx.teacher, self._part("student")
        assert source is not None  # build() refuses to run without the fine-tuned teacher
        with frozen_eval(source):
            targets = last_layer_projections(source, batch)
        predictions = last_layer_projections(learner, batch)
        return self_attention_relation_losses(targets, predictions, batch["attention_mask"], self.relation_heads, self.relations)

    def _part(self, name: str) -> PreTrainedModel:
        """The student or the assistant: `build` puts only PreTrainedModels into the ModuleDict."""
        return cast(PreTrainedModel, self.model[name])

    def eval_model(self) -> nn.Module:
        return self.model["student"]

    def export(self) -> PreTrainedModel:
        return self._part("student")
