"""An MLflow "model from code": a saved student folder as a text-in, labels-out pyfunc model.

This is the registry's fallback when `mlflow.transformers.log_model` cannot log a student (see
pipeline/select/registry.py). MLflow copies this file into the logged model and runs it on the
consumer's machine, where drydock is not installed, so it imports only mlflow, pandas, torch and
transformers — never `pipeline` or `methods`. The student folder travels as the artifact
`student`; a custom architecture (CoFi's pruned BERT) ships its own module inside that folder and
loads with `trust_remote_code=True`.

Input: a list of texts, a list of `{"text": ..., "text_pair": ...}` dicts (pair tasks), or a
DataFrame with a `text` (and `text_pair`) column or a single unnamed text column.
Output: a DataFrame with `label` and `score`, as the transformers flavor returns: the label name
from the model's `id2label` and its softmax probability; for a regression model (STS-B) the
raw predicted value as `score`.
"""

from __future__ import annotations

import mlflow
import pandas as pd


def _rows(model_input) -> list[tuple[str, str | None]]:
    if isinstance(model_input, pd.DataFrame):
        if "text" in model_input.columns:
            pairs = model_input["text_pair"] if "text_pair" in model_input.columns else [None] * len(model_input)
            return [(str(a), None if pd.isna(b) else str(b)) for a, b in zip(model_input["text"], pairs)]
        return [(str(a), None) for a in model_input.iloc[:, 0]]
    if isinstance(model_input, (str, dict)):
        model_input = [model_input]
    rows = []
    for item in model_input:
        if isinstance(item, dict):
            rows.append((str(item["text"]), item.get("text_pair")))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            rows.append((str(item[0]), str(item[1])))
        else:
            rows.append((str(item), None))
    return rows


class StudentTextClassifier(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = context.artifacts["student"]
        self.model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # it reads config.json too
        config = context.model_config or {}
        self.max_length = config.get("max_length")
        self.batch_size = int(config.get("batch_size", 32))

    def predict(self, context, model_input, params=None) -> pd.DataFrame:
        import torch

        rows = _rows(model_input)
        config = self.model.config
        labels, scores = [], []
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            firsts = [a for a, _ in chunk]
            seconds = [b for _, b in chunk]
            pairs = seconds if all(b is not None for b in seconds) else None
            encoded = self.tokenizer(firsts, pairs, padding=True, truncation=self.max_length is not None,
                                     max_length=self.max_length, return_tensors="pt")
            with torch.inference_mode():
                logits = self.model(**encoded).logits.float()
            if getattr(config, "problem_type", None) == "regression":
                labels += [config.id2label.get(0, "LABEL_0")] * len(chunk)
                scores += logits[:, 0].tolist()
                continue
            probs = torch.sigmoid(logits) if logits.shape[-1] == 1 else logits.softmax(-1)
            best = probs.argmax(-1)
            labels += [config.id2label.get(int(i), f"LABEL_{int(i)}") for i in best]
            scores += probs.gather(-1, best[:, None])[:, 0].tolist()
        return pd.DataFrame({"label": labels, "score": scores})


mlflow.models.set_model(StudentTextClassifier())
