"""Every export carries a model card (README.md, issue #23): what it is, measured how and where,
how to load it, what it was not tested on; the select stage's latency is written into it later;
and the registry logs that card instead of asking the hub for one."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

import mlflow
import pytest
import torch
from huggingface_hub import ModelCard
from mlflow import MlflowClient
from transformers import AutoModelForSequenceClassification

from methods._pruned_bert import PrunedBertConfig, PrunedBertForSequenceClassification
from methods.base import TaskInfo
from pipeline.measure.latency import Measurement
from pipeline.prepare.model_card import CARD_FILE, NOT_MEASURED, read_card, write_card
from pipeline.prepare.remote_code import file_digests, remote_code
from pipeline.select.registry import client_for, log_student, tracking
from pipeline.training.export import save_student
from tests.conftest import make_tiny_bert

TASK = TaskInfo(name="sst2", num_labels=2, regression=False, label_names=("negative", "positive"))
METADATA = {"params": {"alpha": 0.5}, "seed": 1, "teacher": "tiny-teacher", "teacher_revision": "abc123",
            "data_fingerprint": "fp-1234", "metric_name": "accuracy", "metric": 0.8125,
            "metrics": {"accuracy": 0.8125, "loss": 0.4375}, "teacher_metric": 0.9}
TIMED = Measurement(path="x", p50_ms=4.2, p90_ms=5.0, mean_ms=4.4, throughput=1900.0, runs=50, warmup=5, batch_size=8,
                    seq_length=64, device="cpu", device_name="Test CPU", threads=2, torch_version="2.13.0", num_params=1,
                    hostname="h")
BATCH = {"input_ids": torch.tensor([[2, 7, 9, 3]]), "attention_mask": torch.ones(1, 4, dtype=torch.long),
         "token_type_ids": torch.zeros(1, 4, dtype=torch.long)}


def card_of(folder: Path) -> ModelCard:
    return ModelCard((folder / CARD_FILE).read_text(encoding="utf-8"))


def stock_export(folder: Path, tokenizer, metadata: dict | None = None):
    model = make_tiny_bert(2)
    return save_student(model, tokenizer, folder, TASK, {"method": "kd", **(metadata or METADATA)}), model


def cofi_export(folder: Path, tokenizer) -> Path:
    """CoFi-shaped, as tests/integration/select/test_registry.py's `custom_student`."""
    torch.manual_seed(0)
    config = PrunedBertConfig(vocab_size=100, hidden_size=24, pooler_size=32, attention_head_size=8, layer_heads=[2, 0],
                              layer_intermediate=[16, 8], num_labels=2, max_position_embeddings=128)
    return save_student(PrunedBertForSequenceClassification(config).eval(), tokenizer, folder, TASK,
                        {"method": "cofi", **METADATA, "params": {"target_sparsity": 0.9}})


def test_a_stock_export_carries_a_card_with_its_facts(tmp_path, tiny_tokenizer):
    folder, model = stock_export(tmp_path / "student", tiny_tokenizer)
    card = card_of(folder)
    data, text = card.data, card.text
    assert data.library_name == "transformers" and data.pipeline_tag == "text-classification"
    assert {"drydock", "drydock-kd", "knowledge-distillation"} <= set(data.tags) and "custom_code" not in data.tags
    assert data.base_model == "tiny-teacher" and data.license == "unknown"  # a hub id whose card is not at hand
    assert data.metrics == ["accuracy"]
    assert [(r.metric_type, r.metric_value, r.dataset_type, r.dataset_split) for r in data.eval_results] == [
        ("accuracy", 0.8125, "sst2", "dev")]
    parameters = sum(p.numel() for p in model.parameters())  # counted from the weights file: drydock.json has none here
    assert f"| parameters | {parameters:,} |" in text
    assert "data fingerprint `fp-1234`" in text and "`tiny-teacher` at hub commit `abc123`" in text
    assert "| method | `kd` — Hinton distillation" in text and 'parameters `{"alpha": 0.5}`; seed 1' in text
    assert "| accuracy | 0.8125 |" in text and "| loss | 0.4375 |" in text and "`negative`, `positive`" in text
    assert f"| latency | {NOT_MEASURED} (" in text and "p50" not in text
    assert "Evaluated only on the dev split of `sst2`" in text and "Latency has not been measured" in text
    assert 'pipeline("text-classification"' in text and "trust_remote_code" not in text
    meta = json.loads((folder / "drydock.json").read_text())
    assert meta["task"] == "sst2" and meta["uses_teacher"] is True and meta["seed"] == 1
    # still a plain folder: no code trusted, and it reloads as the model it was
    assert remote_code(folder) is False
    reloaded = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        assert torch.allclose(reloaded(**BATCH).logits, model(**BATCH).logits, atol=1e-6)


def test_the_select_stages_measurement_goes_into_the_card_and_out_again(tmp_path, tiny_tokenizer):
    folder, _ = stock_export(tmp_path / "student", tiny_tokenizer, {**METADATA, "num_params": 12345, "num_params_encoder": 2345})
    before = card_of(folder)
    write_card(folder, TIMED, speedup=2.5)
    after = card_of(folder)
    assert after.data.to_dict() == before.data.to_dict()  # only the body's latency changes
    assert ("| latency | p50 4.20 ms, p90 5.00 ms per batch of 8 × 64 tokens (random ids, full attention mask) on "
            "Test CPU (cpu, 2 threads, torch 2.13.0), 50 timed runs after warm-up, 2.50× the teacher's speed on the same "
            "machine |") in after.text
    assert NOT_MEASURED not in after.text and "| parameters | 12,345 (2,345 outside the embeddings) |" in after.text
    assert "Latency was measured only on Test CPU (cpu, 2 threads, torch 2.13.0), with batches of 8 × 64 tokens" in after.text
    assert read_card(folder).content == after.content  # what the registry logs is the file as it is
    write_card(folder, TIMED, speedup=float("nan"))  # the results table's empty cell
    assert "p50 4.20 ms" in card_of(folder).text and "teacher's speed" not in card_of(folder).text
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_a_cofi_card_says_what_code_runs_and_how_to_check_it(tmp_path, tiny_tokenizer):
    folder = cofi_export(tmp_path / "student", tiny_tokenizer)
    meta = json.loads((folder / "drydock.json").read_text())
    digests = file_digests(folder)
    assert list(digests) == ["_pruned_bert.py"] and meta["code_files"] == digests  # README.md is no code
    write_card(folder, TIMED)
    assert file_digests(folder) == digests and remote_code(folder) is True  # the rewritten card changes no digest
    card = card_of(folder)
    assert "custom_code" in card.data.tags and "knowledge-distillation" in card.data.tags
    assert f"- `_pruned_bert.py`: `{digests['_pruned_bert.py']}`" in card.text
    assert f"- `code_sha256`: `{meta['code_sha256']}`" in card.text and "trust_remote_code=True" in card.text
    # the card's shell check, run as written, gives the recorded digest
    check = next(line.split("#")[0].strip() for line in card.text.splitlines() if line.endswith("must equal drydock.json's code_sha256"))
    assert check == "sha256sum _pruned_bert.py | sha256sum"
    out = subprocess.run(check, shell=True, cwd=folder, capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == meta["code_sha256"]
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=remote_code(folder)).eval()
    assert type(model).__name__ == "PrunedBertForSequenceClassification"


def test_a_local_teachers_license_is_the_cards(tmp_path, tiny_tokenizer):
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    (teacher / CARD_FILE).write_text("---\nlicense: apache-2.0\n---\n# a teacher\n")
    folder, _ = stock_export(tmp_path / "student", tiny_tokenizer, {**METADATA, "teacher": str(teacher)})
    card = card_of(folder)
    assert card.data.license == "apache-2.0" and card.data.base_model is None  # a folder is no hub id
    assert "License: `apache-2.0`, the teacher's." in card.text


def test_the_teacher_stages_folder_gets_a_teachers_card(tmp_path, tiny_tokenizer):
    """The teacher stage saves through `save_student` too: its card must not call it a student."""
    model = make_tiny_bert(2)
    folder = save_student(model, tiny_tokenizer, tmp_path / "teacher", TASK,
                          {"role": "teacher", "teacher": "tiny-teacher", "data_fingerprint": "fp-1234"})
    card = card_of(folder)
    assert card.text.lstrip().startswith("# sst2: the fine-tuned teacher\n") and "knowledge-distillation" not in card.data.tags
    assert f"| parameters | {sum(p.numel() for p in model.parameters()):,} |" in card.text
    assert "`teacher_metrics.json`" in card.text and card.data.eval_results is None


@pytest.fixture
def store(tmp_path) -> tuple[str, MlflowClient, str]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = client_for(uri)
    experiment = client.create_experiment("cards", artifact_location=(tmp_path / "mlartifacts").as_uri())
    return uri, client, experiment


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_the_registry_logs_the_exports_card_and_asks_the_hub_for_none(store, tmp_path, tiny_tokenizer):
    uri, client, experiment = store
    folder, _ = stock_export(tmp_path / "student", tiny_tokenizer)
    write_card(folder, TIMED, speedup=2.5)
    run_id = client.create_run(experiment).info.run_id
    client.log_artifacts(run_id, str(folder), "student")  # as the recorder does, before the latency was known
    shutil.copy(folder / CARD_FILE, tmp_path / "timed.md")
    records = Records()
    logger = logging.getLogger("mlflow")
    logger.addHandler(records)
    try:
        with tracking(uri):
            model_uri, flavor = log_student(folder, run_id, max_length=32)
            logged = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=str(tmp_path / "logged")))
    finally:
        logger.removeHandler(records)
    card = (tmp_path / "timed.md").read_text(encoding="utf-8")
    assert flavor == "transformers" and (logged / CARD_FILE).read_text(encoding="utf-8") == card
    assert (logged / "model_card.md").read_text(encoding="utf-8") == ModelCard(card).text  # MLflow's own copy of it
    assert not [m for m in records.messages if "model card" in m or "license information" in m]
    run_copy = Path(client.download_artifacts(run_id, f"student/{CARD_FILE}", str(tmp_path / "run")))
    assert run_copy.read_text(encoding="utf-8") == card


def test_the_cards_dataset_is_the_hubs_id_where_there_is_one():
    """GLUE's tasks are `nyu-mll/glue` with the task as config, read from the hub or from a GLUE
    folder (the hub links the card to the dataset's page); files and synthetic data keep the
    task's name."""
    from pipeline.config import TaskConfig
    from pipeline.prepare.model_card import card_data

    assert TaskConfig(name="sst2", source="glue_dir", glue_dir="/data/glue").hub_dataset() == ("nyu-mll/glue", "sst2")
    assert TaskConfig(name="rte").hub_dataset() == ("nyu-mll/glue", "rte")
    assert TaskConfig(name="imdb", hub_path="stanfordnlp/imdb", text_columns=["text"], label_names=["neg", "pos"]).hub_dataset() == ("stanfordnlp/imdb", None)
    assert TaskConfig(name="synthetic", source="synthetic").hub_dataset() is None
    meta = {**METADATA, "method": "kd", "task": "sst2", "dataset": "nyu-mll/glue", "dataset_config": "sst2"}
    (result,) = card_data(meta, custom=False, license_fields={}).eval_results
    assert (result.dataset_type, result.dataset_config, result.dataset_name) == ("nyu-mll/glue", "sst2", "sst2 (dev split)")
    (result,) = card_data({**METADATA, "method": "kd", "task": "synthetic"}, custom=False, license_fields={}).eval_results
    assert (result.dataset_type, result.dataset_config) == ("synthetic", None)
