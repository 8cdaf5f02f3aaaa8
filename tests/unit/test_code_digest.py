"""No unverified code runs (issue 21): a CoFi export's `_pruned_bert.py` is recorded by its digest,
and every loader in drydock — the export's verification, latency, `drydock eval`, the registry's
logging — and the registry consumer's pyfunc refuse a folder whose code is not the recorded one,
before any of it is imported. A tampered file writes a marker when imported: it must never appear.
A stock BERT loads with `trust_remote_code=False`."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pytest
import torch

from methods._pruned_bert import PrunedBertConfig, PrunedBertForSequenceClassification
from methods.base import TaskInfo
from pipeline.config import LatencyConfig
from pipeline.errors import DrydockError
from pipeline.measure.latency import check_seq_length, measure_folder
from pipeline.measure.student_pyfunc import StudentTextClassifier
from pipeline.select.champion import CHAMPION
from pipeline.select.evaluate import load_predictor
from pipeline.select.registry import client_for, log_student, register, text_classifier, tracking, version_tags
from pipeline.training.export import ExportMismatch, Verifier, save_student
from tests.conftest import make_tiny_bert

ROOT = Path(__file__).resolve().parents[2]
TASK = TaskInfo(name="sst2", num_labels=2, regression=False, label_names=("negative", "positive"))
TIMING = LatencyConfig(batch_size=1, seq_length=8, warmup=0, min_runs=1, min_seconds=0.001)
BATCH = {"input_ids": torch.tensor([[2, 7, 9, 3]]), "attention_mask": torch.ones(1, 4, dtype=torch.long),
         "token_type_ids": torch.zeros(1, 4, dtype=torch.long)}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cofi_export(folder: Path, tokenizer) -> Path:
    torch.manual_seed(0)
    config = PrunedBertConfig(vocab_size=100, hidden_size=24, pooler_size=32, attention_head_size=8, layer_heads=[2, 0],
                              layer_intermediate=[16, 8], num_labels=2, max_position_embeddings=64)
    return save_student(PrunedBertForSequenceClassification(config).eval(), tokenizer, folder, TASK, {"method": "cofi"})


def tamper(code_file: Path, marker: Path) -> None:
    """What an attacker with write access to the work directory or the bucket appends."""
    with code_file.open("a") as f:
        f.write(f"\nimport pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")


def pyfunc_context(folder: Path, code_files) -> SimpleNamespace:
    """What MLflow hands `load_context`: the artifact's local path and the logged model config."""
    return SimpleNamespace(artifacts={"student": str(folder)}, model_config={"max_length": 32, "code_files": code_files})


def test_the_export_records_its_code_and_the_version_is_tagged_with_it(tmp_path, tiny_tokenizer):
    folder = cofi_export(tmp_path / "cofi", tiny_tokenizer)
    meta = json.loads((folder / "drydock.json").read_text())
    digest = sha256(folder / "_pruned_bert.py")
    assert digest == sha256(ROOT / "methods" / "_pruned_bert.py")  # drydock's own module, copied
    assert meta["code_files"] == {"_pruned_bert.py": digest}
    # one digest for the tags: of the lines `sha256sum *.py` prints, sorted
    assert meta["code_sha256"] == hashlib.sha256(f"{digest}  _pruned_bert.py\n".encode()).hexdigest()
    config = {"method": "cofi", "config": "cofi", "params": {}, "best_trial_id": "t", "best_seed": 0, "metric_name": "accuracy",
              "metric_mean": 0.8, "metric_std": 0.0, "n": 1, "best_metric": 0.8, "best_latency_ms": 2.0,
              "best_latency_p90_ms": 2.5, "best_speedup": 5.0, "num_params": 10.0, "num_params_encoder": 5.0,
              "best_student_path": str(folder)}
    assert version_tags(config, "sweep", None, meta)["code_sha256"] == meta["code_sha256"]
    stock = save_student(make_tiny_bert(2), tiny_tokenizer, tmp_path / "stock", TASK, {"method": "kd"})
    assert "code_files" not in json.loads((stock / "drydock.json").read_text())


def test_a_tampered_cofi_export_is_refused_by_every_loader_and_never_runs(tmp_path, tiny_tokenizer):
    good = cofi_export(tmp_path / "good", tiny_tokenizer)
    bad = cofi_export(tmp_path / "bad", tiny_tokenizer)
    recorded = json.loads((bad / "drydock.json").read_text()).get("code_files")
    marker = tmp_path / "ran.txt"
    tamper(bad / "_pruned_bert.py", marker)
    loaders = {
        "registry / drydock eval's folder loader": lambda: text_classifier(bad),
        "drydock eval": lambda: load_predictor(str(bad), 32),
        "latency's position check": lambda: check_seq_length(bad, TIMING),
        "latency": lambda: measure_folder(bad, TIMING),
        "the consumer's pyfunc": lambda: StudentTextClassifier().load_context(pyfunc_context(bad, recorded)),
    }
    for name, load in loaders.items():
        with pytest.raises(Exception, match=r"_pruned_bert\.py.*SHA-256") as caught:
            load()
        assert "recorded" in str(caught.value), name
        assert not marker.exists(), name
    # the export's verification, in its fresh process without drydock: the good one still loads
    with Verifier() as verifier:
        assert verifier.logits(good, BATCH).shape == (1, 2)
        with pytest.raises(ExportMismatch, match=r"_pruned_bert\.py.*SHA-256"):
            verifier.logits(bad, BATCH)
    assert not marker.exists()
    # the untampered export loads through the same loaders
    assert text_classifier(good)("a film")[0]["label"] in TASK.label_names
    check_seq_length(good, TIMING)
    assert measure_folder(good, TIMING).num_params > 0
    pyfunc = StudentTextClassifier()
    pyfunc.load_context(pyfunc_context(good, recorded))
    assert list(pyfunc.predict(None, ["a film"])["label"]) in (["negative"], ["positive"])


def test_unrecorded_or_added_code_is_refused(tmp_path, tiny_tokenizer):
    marker = tmp_path / "ran.txt"
    # a stock folder given an auto_map and a module: code nothing recorded
    stock = save_student(make_tiny_bert(2), tiny_tokenizer, tmp_path / "stock", TASK, {"method": "kd"})
    config = json.loads((stock / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "evil.Model"}
    (stock / "config.json").write_text(json.dumps(config))
    tamper(stock / "evil.py", marker)
    with pytest.raises(DrydockError, match="records no digest"):
        text_classifier(stock)
    with pytest.raises(Exception, match="records no digest"):
        StudentTextClassifier().load_context(pyfunc_context(stock, None))
    # a CoFi export with a second module dropped beside the recorded one
    cofi = cofi_export(tmp_path / "cofi", tiny_tokenizer)
    tamper(cofi / "helper.py", marker)
    with pytest.raises(DrydockError, match=r"helper\.py: this code file is not recorded"):
        measure_folder(cofi, TIMING)
    assert not marker.exists()


def test_a_stock_student_loads_without_trust_remote_code(tmp_path, tiny_tokenizer):
    from pipeline.prepare.remote_code import remote_code

    marker = tmp_path / "ran.txt"
    stock = save_student(make_tiny_bert(2), tiny_tokenizer, tmp_path / "stock", TASK, {"method": "kd"})
    tamper(stock / "stray.py", marker)  # no config names it: loaded without trust_remote_code, it never runs
    assert remote_code(stock) is False
    assert text_classifier(stock)("a film")[0]["label"] in TASK.label_names
    check_seq_length(stock, TIMING)
    assert not marker.exists()
    assert remote_code(cofi_export(tmp_path / "cofi", tiny_tokenizer)) is True


def test_the_registry_consumer_refuses_a_tampered_student(tmp_path, tiny_tokenizer):
    folder = cofi_export(tmp_path / "cofi", tiny_tokenizer)
    meta = json.loads((folder / "drydock.json").read_text())
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = client_for(uri)
    experiment = client.create_experiment("code", artifact_location=(tmp_path / "artifacts").as_uri())
    run = client.create_run(experiment).info.run_id
    client.set_terminated(run)
    with tracking(uri):
        with pytest.raises(DrydockError, match="transformers flavor"):  # it would trust the code unchecked
            log_student(folder, run, max_length=32, flavor="transformers", log=lambda _: None)
        model_uri, used = log_student(folder, run, max_length=32, flavor="auto", log=lambda _: None)
        assert used == "pyfunc"
        assert client.get_run(run).data.tags["drydock.code_sha256"] == meta["code_sha256"]
        assert list(mlflow.pyfunc.load_model(model_uri).predict(["a film"]).columns) == ["label", "score"]
        from pipeline.select.evaluate import registered_code  # drydock eval's reading of the tag

        version = register(client, "code", model_uri, {"code_sha256": meta["code_sha256"]})
        assert registered_code(f"models:/code@{CHAMPION}", uri) is None  # no such alias yet
        client.set_registered_model_alias("code", CHAMPION, version.version)
        assert registered_code(f"models:/code@{CHAMPION}", uri) == {"code_sha256": meta["code_sha256"]}
        # held to the registry's tag (kept in the database): a model whose recorded code differs is refused
        with pytest.raises(Exception, match="was expected"):
            mlflow.pyfunc.load_model(model_uri, model_config={"code_sha256": "0" * 64})
        logged = list((tmp_path / "artifacts").rglob("_pruned_bert.py"))
        assert len(logged) == 1
        marker = tmp_path / "ran.txt"
        tamper(logged[0], marker)  # the artifact bucket's copy
        with pytest.raises(Exception, match=r"_pruned_bert\.py.*SHA-256"):
            mlflow.pyfunc.load_model(model_uri)
        assert not marker.exists()
        # drydock's own loaders refuse the tampered folder before logging it
        shutil.copy(logged[0], folder / "_pruned_bert.py")
        with pytest.raises(DrydockError, match=r"_pruned_bert\.py.*SHA-256"):
            log_student(folder, run, max_length=32, flavor="auto", log=lambda _: None)
    assert not marker.exists()
