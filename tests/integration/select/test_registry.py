"""The registry against a real SQLite MLflow store: versions, tags, the champion alias, a consumer
without drydock, and the whole select stage on a hand-made sweep folder."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from mlflow import MlflowClient

from methods._pruned_bert import PrunedBertConfig, PrunedBertForSequenceClassification
from methods.base import TaskInfo
from pipeline import results as results_table
from pipeline.cli.outputs import COMMANDS, add_commands
from pipeline.config import SelectionConfig, spec_from_dict
from pipeline.errors import DrydockError
from pipeline.measure.latency import cpu_name
from pipeline.select.champion import CHAMPION
from pipeline.select.pareto import select
from pipeline.select.registry import (
    client_for,
    log_student,
    promote,
    register,
    register_front,
    tracking,
    version_tags,
)
from pipeline.select.variant_registry import VariantFront
from pipeline.training.export import save_student
from tests.conftest import make_tiny_bert, variant, variants_of

TASK = TaskInfo(name="sst2", num_labels=2, regression=False, label_names=("negative", "positive"))
METADATA = {"teacher": "tiny-teacher", "data_fingerprint": "fp-1234"}
LONG_TEXT = " ".join(["a truly wonderful and moving film"] * 60)  # ~360 tokens > the 128 positions


@pytest.fixture(scope="module")
def template_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mlflow_template") / "template.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()  # creates and migrates the schema once
    return path


@pytest.fixture
def store(template_db, tmp_path) -> tuple[str, MlflowClient, str]:
    """(uri, client, experiment id) of a fresh store, with artifacts under tmp_path."""
    db = tmp_path / "mlflow.db"
    shutil.copy(template_db, db)
    uri = f"sqlite:///{db}"
    client = client_for(uri)
    experiment = client.create_experiment("registry-test", artifact_location=(tmp_path / "mlartifacts").as_uri())
    return uri, client, experiment


def stock_student(folder: Path, tokenizer, seed: int = 0) -> Path:
    return save_student(make_tiny_bert(2, seed=seed), tokenizer, folder, TASK, {"method": "kd", **METADATA})


def custom_student(folder: Path, tokenizer) -> Path:
    """A CoFi-shaped export: per-layer heads and widths, its module shipped beside the weights."""
    torch.manual_seed(0)
    config = PrunedBertConfig(vocab_size=100, hidden_size=24, pooler_size=32, attention_head_size=8, layer_heads=[2, 0],
                              layer_intermediate=[16, 8], num_labels=2, max_position_embeddings=128)
    folder = save_student(PrunedBertForSequenceClassification(config).eval(), tokenizer, folder, TASK, {"method": "cofi", **METADATA})
    assert (folder / "_pruned_bert.py").is_file() and "auto_map" in json.loads((folder / "config.json").read_text())
    return folder


def trial(trial_id: str, method: str, seed: int, metric: float, latency: float, folder: Path | None, run_id: str | None, **params):
    row = results_table.trial_row(trial_id, method, seed, params, "finished",
                                  {"metric": metric, "metric_name": "accuracy", "teacher_metric": 0.9, "num_params": 5000,
                                   "num_params_encoder": 3000, "student_path": str(folder) if folder else None},
                                  mlflow_run_id=run_id)
    row.update(latency_ms=latency, latency_p90_ms=latency * 1.2, speedup=10.0 / latency)
    return row


def new_run(client: MlflowClient, experiment: str, name: str) -> str:
    run = client.create_run(experiment, run_name=name)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def register_round(uri, experiment, rows, name="students", budget: SelectionConfig | None = None, log=lambda _: None):
    chosen = select(results_table.to_frame(rows), budget or SelectionConfig())
    outcome = register_front(uri, name, chosen.front, chosen.champion, sweep="test-sweep", experiment_id=experiment,
                             measurements={}, max_length=128, pair=False, budget=budget or SelectionConfig(), log=log)
    return chosen, outcome


def test_versions_are_tagged_and_the_champion_moves_only_on_improvement(store, tmp_path, tiny_tokenizer, capsys):
    uri, client, experiment = store
    a = stock_student(tmp_path / "a", tiny_tokenizer, seed=0)
    b = custom_student(tmp_path / "b", tiny_tokenizer)
    run_a, run_b = new_run(client, experiment, "kd"), new_run(client, experiment, "cofi")
    ended_a = client.get_run(run_a).info.end_time
    rows = [
        trial("kd-s0", "kd", 0, 0.80, 4.0, a, run_a, alpha=0.5), trial("kd-s1", "kd", 1, 0.78, 4.0, None, None, alpha=0.5),
        trial("cofi-s0", "cofi", 0, 0.75, 2.0, b, run_b, sparsity=0.9),
    ]
    chosen, outcome = register_round(uri, experiment, rows)
    assert len(chosen.front) == 2 and set(outcome.versions.values()) == {"1", "2"}
    by_method = {client.get_model_version("students", v).tags["method"]: client.get_model_version("students", v) for v in ("1", "2")}
    kd, cofi = by_method["kd"], by_method["cofi"]
    kd_version = str(kd.version)  # MLflow returns versions as int or str depending on the call
    assert kd.run_id == run_a and cofi.run_id == run_b  # logged under each best seed's trial run
    # logging the model resumed the trial's run; its ending is as it was
    assert client.get_run(run_a).info.end_time == ended_a and client.get_run(run_a).info.status == "FINISHED"
    assert float(kd.tags["metric"]) == pytest.approx(0.79) and float(kd.tags["metric_std"]) == pytest.approx(0.0141421, rel=1e-4)
    assert kd.tags["metric_n"] == "2" and kd.tags["metric_name"] == "accuracy" and kd.tags["trial_id"] == "kd-s0"
    assert json.loads(kd.tags["params"]) == {"alpha": 0.5} and kd.tags["config"] == "kd"  # its default alpha
    assert float(kd.tags["latency_ms"]) == 4.0 and float(kd.tags["speedup"]) == 2.5 and kd.tags["num_params"] == "5000"
    assert kd.tags["teacher"] == "tiny-teacher" and kd.tags["data_fingerprint"] == "fp-1234"
    # custom code never goes through the transformers flavor, which would trust it unchecked (issue 21)
    assert kd.tags["flavor"] == "transformers" and cofi.tags["flavor"] == "pyfunc"
    assert cofi.tags["code_sha256"] == json.loads((b / "drydock.json").read_text())["code_sha256"] and "code_sha256" not in kd.tags
    assert cofi.tags["student_path"] == str(b)
    assert outcome.decision.moved and outcome.decision.version == kd_version and outcome.decision.reason == "no champion yet"
    assert str(client.get_model_version_by_alias("students", CHAMPION).version) == kd_version

    # the same round again: no duplicate versions, the champion stays
    _, again = register_round(uri, experiment, rows)
    assert again.versions == outcome.versions and len(client.search_model_versions("name = 'students'")) == 2
    assert not again.decision.moved and again.decision.reason == "already the champion"

    # a worse sweep: its member is registered, the alias does not regress
    worse = stock_student(tmp_path / "worse", tiny_tokenizer, seed=1)
    _, third = register_round(uri, experiment, [trial("kd2-s0", "kd", 0, 0.70, 3.0, worse, new_run(client, experiment, "w"), alpha=0.1)])
    assert third.versions == {next(iter(third.versions)): "3"}
    assert not third.decision.moved and third.decision.version == kd_version
    assert third.decision.reason == "accuracy 0.7000 does not beat the champion's 0.7900"
    assert str(client.get_model_version_by_alias("students", CHAMPION).version) == kd_version

    # a better one within the budget moves it; one over the budget is not even the champion candidate
    better = stock_student(tmp_path / "better", tiny_tokenizer, seed=2)
    slow = stock_student(tmp_path / "slow", tiny_tokenizer, seed=3)
    _, fourth = register_round(uri, experiment, [
        trial("kd3-s0", "kd", 0, 0.85, 3.0, better, new_run(client, experiment, "b"), alpha=0.2),
        trial("kd4-s0", "kd", 0, 0.95, 9.0, slow, new_run(client, experiment, "s"), alpha=0.3),
    ], budget=SelectionConfig(max_latency_ms=5.0))
    better_version = client.get_model_version("students", fourth.decision.version)
    assert fourth.decision.moved and fourth.decision.previous == kd_version and better_version.tags["trial_id"] == "kd3-s0"
    assert fourth.decision.reason == "accuracy 0.8500 beats the champion's 0.7900"

    # by hand, and through the CLI
    assert promote(client, "students", "1") == str(better_version.version)
    assert str(client.get_model_version_by_alias("students", CHAMPION).version) == "1"
    with pytest.raises(DrydockError, match="students version 99: no such version"):
        promote(client, "students", "99")
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command", required=True))
    assert COMMANDS["promote"](parser.parse_args(["promote", "students", "2", "--tracking-uri", uri])) == 0
    assert "students: champion → v2 (was v1)" in capsys.readouterr().out
    assert COMMANDS["registry"](parser.parse_args(["registry", "list", "students", "--tracking-uri", uri])) == 0
    listing = capsys.readouterr().out
    assert "champion → v2" in listing and "│ kd " in listing and "accuracy 0.7900 ± 0.0141 (n=2)" in listing
    assert len([line for line in listing.splitlines() if "tiny-teacher" in line or "kd-s0" in line or "cofi-s0" in line]) >= 2
    with pytest.raises(DrydockError, match="registered model 'nobody' not found"):
        COMMANDS["registry"](parser.parse_args(["registry", "list", "nobody", "--tracking-uri", uri]))


def test_configurations_tied_exactly_on_the_front_are_registered_once(store, tmp_path, tiny_tokenizer):
    """A thousand configurations of one architecture whose metrics tie would otherwise mean a
    thousand versions of one point (benchmarks/sweep_scale.py's students tie so)."""
    uri, client, experiment = store
    folders = [stock_student(tmp_path / f"s{i}", tiny_tokenizer, seed=i) for i in range(4)]
    runs = [new_run(client, experiment, f"kd{i}") for i in range(4)]
    rows = [trial(f"kd{i}-s0", "kd", 0, 0.80, 4.0, folders[i], runs[i], alpha=a) for i, a in enumerate((0.1, 0.5, 0.9))]
    rows.append(trial("kd3-s0", "kd", 0, 0.70, 2.0, folders[3], runs[3], alpha=0.3))  # another point of the front
    said: list[str] = []
    chosen, outcome = register_round(uri, experiment, rows, log=said.append)
    assert len(chosen.front) == 4  # the front keeps all three tied configurations
    versions = client.search_model_versions("name = 'students'")
    assert len(versions) == 2 and sorted(set(outcome.versions.values())) == ["1", "2"]
    tied_keys = set(chosen.front[chosen.front["metric_mean"] == 0.80]["config_key"])
    assert len(tied_keys) == 3 and len({outcome.versions[k] for k in tied_keys}) == 1  # one version serves the point
    version = client.get_model_version("students", outcome.versions[next(iter(tied_keys))])
    assert version.tags["front_ties"] == "2" and version.tags["config"] == chosen.champion["config"]
    assert version.tags["metric"] == "0.8" and version.tags["latency_ms"] == "4.0"  # plain numbers, not numpy's text
    assert str(client.get_model_version_by_alias("students", CHAMPION).version) == str(version.version)
    assert any(f"2 other configuration(s) of the front tie exactly with {chosen.champion['config']}" in line for line in said)


def test_tied_variants_on_the_front_are_registered_once_too(store, tmp_path, tiny_tokenizer):
    """With runtime variants (the CPU default), the int8 exports of tied configurations, timed once
    per architecture and scoring alike, are one point of the variants' front: one version."""
    from pipeline.measure.engines import build_variant

    uri, client, experiment = store
    folders = [stock_student(tmp_path / f"s{i}", tiny_tokenizer, seed=i) for i in range(3)]
    rows = [trial(f"kd{i}-s0", "kd", 0, 0.80, 4.0, folders[i], new_run(client, experiment, f"kd{i}"), alpha=a)
            for i, a in enumerate((0.1, 0.5, 0.9))]
    int8 = [build_variant(folders[i], "onnxruntime-int8", tmp_path / "variants" / f"kd{i}-s0") for i in range(3)]
    table = variants_of([variant("teacher", "torch", 0.85, 10.0, tmp_path / "teacher")]
                        + [variant(f"kd{i}-s0", "torch", 0.80, 4.0, folders[i]) for i in range(3)]
                        + [variant(f"kd{i}-s0", "onnxruntime-int8", 0.81, 2.0, int8[i].path) for i in range(3)])
    chosen = select(results_table.to_frame(rows), SelectionConfig())
    said: list[str] = []
    outcome = register_front(uri, "students", chosen.front, chosen.champion, sweep="test-sweep", experiment_id=experiment,
                             measurements={}, max_length=128, pair=False, budget=SelectionConfig(), log=said.append,
                             variants_front=VariantFront(table, chosen.configs, SelectionConfig()))
    assert len(set(outcome.versions.values())) == 1 and len(outcome.versions) == 3  # one eager version for the point
    assert sorted(outcome.variants) == [f"kd{i}-s0/onnxruntime-int8" for i in range(3)]
    assert len(set(outcome.variants.values())) == 1  # one int8 version serves the three
    assert len(client.search_model_versions("name = 'students'")) == 2
    assert any("2 other variant(s) of the front tie exactly with kd0-s0/onnxruntime-int8" in line for line in said), said
    assert outcome.decision.version == outcome.variants["kd0-s0/onnxruntime-int8"]


def test_a_champion_outside_the_current_budget_gives_way(store, tmp_path, tiny_tokenizer):
    uri, client, experiment = store
    folders = [stock_student(tmp_path / f"s{i}", tiny_tokenizer, seed=i) for i in range(3)]
    _, first = register_round(uri, experiment, [trial("a-s0", "kd", 0, 0.90, 8.0, folders[0], new_run(client, experiment, "a"), alpha=0.1)])
    assert first.decision.moved and first.decision.version == "1"
    # a tighter budget: the 8 ms champion is outside it, so a worse but in-budget model takes the alias
    _, second = register_round(uri, experiment, [trial("b-s0", "kd", 0, 0.80, 3.0, folders[1], new_run(client, experiment, "b"), alpha=0.2)],
                               budget=SelectionConfig(max_latency_ms=5.0))
    assert second.decision.moved and (second.decision.previous, second.decision.version) == ("1", "2")
    assert second.decision.reason == "the champion is outside this sweep's latency budget (latency 8.00 ms > 5 ms)"
    assert str(client.get_model_version_by_alias("students", CHAMPION).version) == "2"
    # tighter still, and nothing of this sweep meets it: the alias stays, and the decision says why
    messages: list[str] = []
    chosen, third = register_round(uri, experiment, [trial("c-s0", "kd", 0, 0.95, 4.0, folders[2], new_run(client, experiment, "c"),
                                                            alpha=0.3)], budget=SelectionConfig(max_latency_ms=2.0), log=messages.append)
    assert chosen.champion is None and not third.decision.moved and third.decision.version == "2"
    reason = ("the champion is outside this sweep's latency budget (latency 3.00 ms > 2 ms), "
              "but no configuration of this sweep meets it either")
    assert third.decision.reason == reason and messages[-1] == f"registry: champion stays on v2 ({reason})"
    assert str(client.get_model_version_by_alias("students", CHAMPION).version) == "2"


def test_a_champion_without_a_registered_version_is_logged(store, tmp_path):
    uri, client, experiment = store
    chosen = select(results_table.to_frame([trial("kd-s0", "kd", 0, 0.80, 4.0, tmp_path / "gone", None, alpha=0.5)]),
                    SelectionConfig())
    messages: list[str] = []
    outcome = register_front(uri, "students", chosen.front, chosen.champion, sweep="test-sweep", experiment_id=experiment,
                             measurements={}, max_length=128, pair=False, log=messages.append)
    assert outcome.versions == {} and outcome.decision is None
    assert messages == [f"registry: kd: student folder {tmp_path / 'gone'} is missing; not registered",
                        "registry: the champion candidate kd has no registered version; the champion alias is left alone"]


CONSUMER = r"""
import json, sys
sys.modules["pipeline"] = sys.modules["methods"] = None  # a consumer has no drydock
import mlflow
mlflow.set_tracking_uri(sys.argv[1])
out = {}
for ref in ("models:/consumer@champion", "models:/consumer/2", "models:/consumer/3"):
    model = mlflow.pyfunc.load_model(ref)
    texts = model.predict(["a truly wonderful film", "dull and far too long", sys.argv[2]])
    pairs = model.predict([{"text": "a wonderful film", "text_pair": "i loved it"}])
    out[ref] = {"labels": list(texts["label"]), "scores": [float(s) for s in texts["score"]],
                "pair_labels": list(pairs["label"]), "columns": list(texts.columns)}
pair_model = mlflow.pyfunc.load_model("models:/consumer/4")  # logged for a pair task: pairs in
pairs = pair_model.predict([{"text": "a wonderful film", "text_pair": "i loved it"}, {"text": "dull", "text_pair": "boring"}])
out["pair_task"] = {"labels": list(pairs["label"]), "inputs": [i.name for i in pair_model.metadata.signature.inputs.inputs]}
print("RESULT" + json.dumps(out))
"""


def expected_top(folder: Path, text: str) -> tuple[str, float]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(folder), trust_remote_code=True).eval()
    encoded = AutoTokenizer.from_pretrained(str(folder))(text, return_tensors="pt")
    with torch.no_grad():
        probs = model(**encoded).logits.softmax(-1)[0]
    return model.config.id2label[int(probs.argmax())], float(probs.max())


def test_a_consumer_without_drydock_loads_the_champion_and_both_flavors(store, tmp_path, tiny_tokenizer):
    uri, client, experiment = store
    stock = stock_student(tmp_path / "stock", tiny_tokenizer)
    custom = custom_student(tmp_path / "custom", tiny_tokenizer)
    run = new_run(client, experiment, "consumer")
    tags = {"metric_name": "accuracy", "metric": "0.8"}
    with tracking(uri):
        registered = []
        # custom code: "auto" logs the checking pyfunc, never the transformers flavor (issue 21)
        for folder, flavor, pair in ((stock, "transformers", False), (custom, "auto", False), (custom, "pyfunc", False),
                                     (stock, "transformers", True)):
            model_uri, used = log_student(folder, run, max_length=128, pair=pair, flavor=flavor, log=lambda _: None)
            assert used == ("pyfunc" if folder == custom else flavor)
            registered.append(str(register(client, "consumer", model_uri, {**tags, "flavor": used}).version))
    assert registered == ["1", "2", "3", "4"]
    client.set_registered_model_alias("consumer", CHAMPION, "1")

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", CONSUMER, uri, LONG_TEXT], capture_output=True, text=True, check=False,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    pair_task = result.pop("pair_task")
    assert pair_task["inputs"] == ["text", "text_pair"] and len(pair_task["labels"]) == 2
    assert set(pair_task["labels"]) <= {"negative", "positive"}
    for ref, got in result.items():
        assert got["columns"] == ["label", "score"], ref
        assert set(got["labels"]) <= {"negative", "positive"} and len(got["labels"]) == 3, ref
        assert all(0.5 <= s <= 1.0 for s in got["scores"]), ref  # top-class probability of two classes
        assert got["pair_labels"][0] in {"negative", "positive"}, ref
    # the consumer's numbers are the model's own
    for ref, folder in (("models:/consumer@champion", stock), ("models:/consumer/2", custom)):
        label, score = expected_top(folder, "a truly wonderful film")
        assert result[ref]["labels"][0] == label and result[ref]["scores"][0] == pytest.approx(score, abs=1e-5)
    # the pyfunc gives the same for the same folder whichever way it was asked for
    assert result["models:/consumer/3"]["labels"] == result["models:/consumer/2"]["labels"]
    assert result["models:/consumer/3"]["scores"] == pytest.approx(result["models:/consumer/2"]["scores"], abs=1e-5)


def test_the_pyfunc_refuses_weights_swapped_in_the_store(store, tmp_path, tiny_tokenizer):
    """The student pyfunc carries the export's weights digests (drydock.json's `weights_files`) in
    its model config and checks the downloaded folder against them before transformers loads it:
    a `model.safetensors` changed in the artifact store is refused naming the file."""
    import mlflow

    uri, client, experiment = store
    custom = custom_student(tmp_path / "custom", tiny_tokenizer)
    recorded = json.loads((custom / "drydock.json").read_text())["weights_files"]
    run = new_run(client, experiment, "swapped")
    with tracking(uri):
        model_uri, used = log_student(custom, run, max_length=128, pair=False, flavor="pyfunc", log=lambda _: None)
        assert used == "pyfunc"
        model = mlflow.pyfunc.load_model(model_uri)  # untouched: it loads
        assert model.model_config["weights_files"] == recorded and recorded
        stored = Path(mlflow.get_logged_model(model_uri.split("/")[-1]).artifact_location.removeprefix("file://"))
        [weights] = stored.rglob("model.safetensors")
        data = bytearray(weights.read_bytes())
        data[-4:] = bytes(4)  # other weights, still a valid file
        weights.write_bytes(bytes(data))
        with pytest.raises(Exception, match=r"model.safetensors: SHA-256 [0-9a-f]{64}, but [0-9a-f]{64} was recorded when the "
                                            r"model was registered; refusing to load weights"):
            mlflow.pyfunc.load_model(model_uri)


def test_tracking_context_leaves_the_process_settings_as_they_were(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    before = (mlflow.get_tracking_uri(), mlflow.get_registry_uri())
    uri = f"sqlite:///{tmp_path / 'x.db'}"
    with tracking(uri):
        assert mlflow.get_tracking_uri() == uri and mlflow.get_registry_uri() == uri
    assert (mlflow.get_tracking_uri(), mlflow.get_registry_uri()) == before
    assert "MLFLOW_TRACKING_URI" not in os.environ and "MLFLOW_REGISTRY_URI" not in os.environ
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    with tracking(uri):
        pass
    assert os.environ["MLFLOW_TRACKING_URI"] == "sqlite:///elsewhere.db" and mlflow.get_tracking_uri() == "sqlite:///elsewhere.db"


def test_version_tags_name_the_measurement(tmp_path):
    from pipeline.measure.latency import Measurement

    m = Measurement(path="x", p50_ms=2.0, p90_ms=2.5, mean_ms=2.1, throughput=4000.0, runs=10, warmup=3, batch_size=8,
                    seq_length=32, device="cpu", device_name="Test CPU", threads=4, torch_version="2.13.0",
                    num_params=10, hostname="h")
    config = {"method": "kd", "config": "kd alpha=0.5", "params": {"alpha": 0.5}, "best_trial_id": "t", "best_seed": 0,
              "metric_name": "accuracy", "metric_mean": 0.8, "metric_std": float("nan"), "n": 1, "best_metric": 0.8,
              "latency_ms": 5.0, "latency_p90_ms": 6.0, "speedup": 2.0, "num_params": 10.0, "num_params_encoder": float("nan"),
              "best_latency_ms": 2.0, "best_latency_p90_ms": 2.5, "best_speedup": 5.0, "best_student_path": "/s"}
    tags = version_tags(config, "sweep", m, {"teacher": "t", "data_fingerprint": "fp"})
    # the registered export's own timing, not the configuration's seed mean
    assert (tags["latency_ms"], tags["latency_p90_ms"], tags["speedup"]) == ("2.0", "2.5", "5.0")
    assert tags["latency_device"] == "Test CPU (cpu, 4 threads, torch 2.13.0)"
    assert (tags["latency_batch_size"], tags["latency_seq_length"], tags["latency_threads"]) == ("8", "32", "4")
    assert tags["num_params"] == "10" and "metric_std" not in tags and "num_params_encoder" not in tags  # unknown: no tag


def test_registry_list_shows_where_and_how_latency_was_measured(store, capsys):
    uri, client, _ = store
    client.create_registered_model("listed")
    client.create_model_version("listed", "file:///nowhere", tags={
        "metric_name": "accuracy", "metric": "0.8", "metric_n": "1", "latency_ms": "2.5", "speedup": "4.0",
        "latency_device": "Test CPU (cpu, 4 threads, torch 2.13.0)", "latency_batch_size": "8", "latency_seq_length": "32"})
    client.create_model_version("listed", "file:///nowhere", tags={"metric_name": "accuracy", "metric": "0.7"})
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command", required=True))
    assert COMMANDS["registry"](parser.parse_args(["registry", "list", "listed", "--tracking-uri", uri])) == 0
    rows = {line.split("│")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.count("│") > 5}
    assert "Test CPU (cpu, 4 threads, torch 2.13.0), batch 8 × 32" in rows["1"] and "2.50" in rows["1"]
    assert "batch" not in rows["2"]  # not measured: nothing made up


def test_select_stage_measures_selects_reports_and_registers(tmp_path, tiny_tokenizer):
    from pipeline.select.stage import select_stage
    from pipeline.tracking import SweepTracker

    workdir = tmp_path / "w"
    spec = spec_from_dict({
        "name": "stage", "task": {"name": "synthetic", "source": "synthetic", "max_seq_length": 32},
        "teacher": {"model": "random", "architecture": {"num_layers": 4}, "tokenizer": {"vocab_size": 100}},
        "tracking": {"registered_model": "stage-student"},
        "selection": {"runtimes": ["torch"],  # eager fp32 at one shape: no variants step (test_variants_stage.py)
                      "latency": {"batch_size": 4, "seq_length": 32, "shapes": ["4x32"], "threads": 1, "warmup": 1, "min_runs": 3,
                                  "min_seconds": 0.05}},
    })
    tracker = SweepTracker(spec, workdir)
    tracker.start_parent(resume=False)
    sweep_dir = workdir / "stage"
    teacher = save_student(make_tiny_bert(4), tiny_tokenizer, workdir / "teachers" / "t", TASK, {"role": "teacher"})
    rows = []
    for key, layers, seeds in (("deep", 3, (0, 1)), ("shallow", 1, (0, 1))):
        for seed in seeds:
            trial_id = f"finetune-{key}-s{seed}"
            folder = save_student(make_tiny_bert(layers, seed=seed), tiny_tokenizer, sweep_dir / "trials" / trial_id / "student",
                                  TASK, {"method": "finetune", **METADATA})
            run_id = tracker.trial_run(trial_id, {"method": "finetune"})
            tracker.finish(run_id, "FINISHED")
            rows.append(results_table.trial_row(trial_id, "finetune", seed, {"num_layers": layers}, "finished",
                                                {"metric": 0.9 - 0.01 * seed if key == "deep" else 0.7, "metric_name": "accuracy",
                                                 "teacher_metric": 0.95, "num_params": 1000 * layers, "student_path": str(folder)},
                                                mlflow_run_id=run_id))
    rows.append(results_table.trial_row("finetune-bad-s0", "finetune", 0, {"num_layers": 9}, "failed", error="boom"))
    results_table.write(sweep_dir / results_table.RESULTS_FILE, results_table.to_frame(rows))

    messages: list[str] = []
    frame = select_stage(spec, workdir, sweep_dir, tracker, teacher, messages.append)

    stored = pd.read_parquet(sweep_dir / results_table.RESULTS_FILE)
    assert list(stored.columns) == results_table.ordered_columns(list(stored.columns))
    pd.testing.assert_frame_equal(stored, frame.reset_index(drop=True), check_dtype=False)
    done = stored[stored["status"] == "finished"].set_index("trial_id")
    # one export per configuration is timed, the seed the registry serves (the best metric; the
    # shallow seeds tie, so the first); the other seeds' latency columns stay empty
    served = ["finetune-deep-s0", "finetune-shallow-s0"]
    timed = done.loc[served]
    assert (timed["latency_ms"] > 0).all() and (timed["latency_p90_ms"] >= timed["latency_ms"]).all()
    assert (timed["speedup"] > 0).all() and set(timed["latency_device"]) == {cpu_name()}
    untimed = done.drop(index=served)
    assert untimed[["latency_ms", "latency_p90_ms", "speedup", "latency_device"]].isna().all().all()
    assert done["pareto"].notna().all()  # the mark belongs to the configuration, timed seed or not
    failed = stored[stored["status"] == "failed"].iloc[0]
    assert pd.isna(failed["latency_ms"]) and pd.isna(failed["pareto"])
    record = json.loads((sweep_dir / "latency.json").read_text())
    assert record["teacher"]["path"] == str(teacher) and set(record["students"]) == set(served)
    assert record["not_timed"] == {"finetune-deep-s1": "finetune-deep-s0", "finetune-shallow-s1": "finetune-shallow-s0"}
    assert list(record["teachers"]) == [""] and record["teachers"][""] == record["teacher"]  # in this process: no node
    for name in ("report.md", "report.html", "pareto.png", "pareto.csv"):
        assert (sweep_dir / name).is_file(), name
    assert "**Teacher** random: accuracy 0.9500" in (sweep_dir / "report.md").read_text()

    client = tracker.client
    parent_artifacts = {a.path for a in client.list_artifacts(tracker.parent_id, "report")}
    assert {"report/report.md", "report/report.html", "report/pareto.png", "report/pareto.csv"} <= parent_artifacts
    assert {a.path for a in client.list_artifacts(tracker.parent_id)} >= {"latency.json", "results.parquet", "report"}
    parent = client.get_run(tracker.parent_id)
    assert parent.data.metrics["teacher/latency_ms"] == pytest.approx(record["teacher"]["p50_ms"])
    for trial_id, row in done.iterrows():
        run = client.get_run(row["mlflow_run_id"])
        assert run.data.tags["drydock.pareto"] == str(bool(row["pareto"])).lower() and run.info.status == "FINISHED"
        if trial_id not in served:
            assert "latency/p50_ms" not in run.data.metrics and "drydock.latency.device" not in run.data.tags
            continue
        assert run.data.metrics["latency/p50_ms"] == pytest.approx(row["latency_ms"])
        assert run.data.metrics["latency/teacher_p50_ms"] == pytest.approx(record["teacher"]["p50_ms"])
        assert run.data.tags["drydock.latency.device"].endswith(f"(cpu, 1 threads, torch {torch.__version__})")
        assert run.data.tags["drydock.latency.device_name"] == cpu_name()
        assert run.data.tags["drydock.latency.batch_size"] == "4"

    # the deep configuration has the best mean; whether the shallow one is on the front depends
    # only on it being faster, which 1 layer vs 3 is
    front = stored[stored["pareto"].fillna(False).astype(bool)]
    assert set(front["params.num_layers"]) <= {1, 3} and 3 in set(front["params.num_layers"])
    versions = client.search_model_versions("name = 'stage-student'")
    assert len(versions) == front["params.num_layers"].nunique()
    champion = client.get_model_version_by_alias("stage-student", CHAMPION)
    assert champion.tags["trial_id"] == "finetune-deep-s0" and float(champion.tags["metric"]) == pytest.approx(0.895)
    assert champion.tags["latency_device"].startswith(record["teacher"]["device_name"])
    assert parent.data.tags["drydock.champion_version"] == str(champion.version)
    assert any("select:" in m and "report" in m for m in messages)


# ----------------------------------------------------------------------------------------------
# drydock eval: a folder and a registry reference, through the consumer's loaders
# ----------------------------------------------------------------------------------------------


def files_spec(tmp_path: Path, with_test_labels: bool = True):
    # three positives to one negative: a model that always says one label scores 0.75 or 0.25,
    # so a swapped label mapping cannot pass for a correct one
    rows = [("a truly wonderful and moving film", "pos"), ("i hated every minute of it", "pos"),
            ("great performances from the whole cast", "pos"), ("boring and predictable and far too long", "neg")] * 3
    for split in ("train", "dev", "test"):
        lines = ["text,label"] + [f"{t},{label}" for t, label in rows] if split != "test" or with_test_labels else \
            ["text"] + [t for t, _ in rows]
        (tmp_path / f"{split}.csv").write_text("\n".join(lines) + "\n")
    return spec_from_dict({
        "name": "evalcheck",
        "task": {"name": "reviews", "source": "files", "text_columns": ["text"], "label_names": ["neg", "pos"],
                 "files": {"train": str(tmp_path / "train.csv"), "dev": str(tmp_path / "dev.csv"), "test": str(tmp_path / "test.csv")},
                 "max_seq_length": 16},
        "teacher": {"model": "random", "tokenizer": {"vocab_size": 100}},
    })


def direct_accuracy(folder: Path, texts: list[str], labels: list[int]) -> float:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(folder), trust_remote_code=True).eval()
    encoded = AutoTokenizer.from_pretrained(str(folder))(texts, padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**encoded).logits.argmax(-1).tolist()
    return sum(p == y for p, y in zip(predicted, labels)) / len(labels)


def test_eval_scores_a_folder_and_a_registry_reference_alike(store, tmp_path, tiny_tokenizer, capsys):
    from pipeline.select.evaluate import evaluate

    uri, client, experiment = store
    spec = files_spec(tmp_path)
    task = TaskInfo(name="reviews", num_labels=2, regression=False, label_names=("neg", "pos"))
    folder = save_student(make_tiny_bert(2, seed=4), tiny_tokenizer, tmp_path / "student", task, {"method": "kd"})
    texts = ["a truly wonderful and moving film", "i hated every minute of it", "great performances from the whole cast",
             "boring and predictable and far too long"] * 3
    expected = direct_accuracy(folder, texts, [1, 1, 1, 0] * 3)
    assert expected != 0.5

    from_folder = evaluate(str(folder), spec, "dev")
    assert from_folder.num_examples == 12 and from_folder.primary_metric == "accuracy"
    assert from_folder.metrics["accuracy"] == pytest.approx(expected)
    assert evaluate(str(folder), spec, "test").metrics["accuracy"] == pytest.approx(expected)  # same rows, labelled test file

    with tracking(uri):
        model_uri, _ = log_student(folder, new_run(client, experiment, "eval"), max_length=16, log=lambda _: None)
        version = register(client, "evalm", model_uri, {"metric_name": "accuracy", "metric": "0.5"})
    client.set_registered_model_alias("evalm", CHAMPION, str(version.version))
    from_registry = evaluate("models:/evalm@champion", spec, "dev", uri)
    assert from_registry.metrics == from_folder.metrics

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command", required=True))
    spec_file = tmp_path / "spec.yaml"
    import yaml

    from pipeline.config import spec_to_dict

    spec_file.write_text(yaml.safe_dump(spec_to_dict(spec)))
    args = parser.parse_args(["eval", f"models:/evalm/{version.version}", str(spec_file), "--tracking-uri", uri])
    assert COMMANDS["eval"](args) == 0
    assert f"models:/evalm/{version.version} on dev (12 examples): accuracy {expected:.4f}" in capsys.readouterr().out
    with pytest.raises(DrydockError, match="models:/nobody@champion: cannot be loaded from the registry"):
        evaluate("models:/nobody@champion", spec, "dev", uri)


def test_eval_refuses_splits_without_labels(tmp_path):
    from pipeline.select.evaluate import evaluate

    with pytest.raises(DrydockError, match=r"test.csv: the test split has no labels \(no column 'label'"):
        evaluate(str(tmp_path), files_spec(tmp_path, with_test_labels=False), "test")
    glue = spec_from_dict({"name": "g", "task": {"name": "sst2", "source": "hub"}, "teacher": {"model": "bert-base-uncased"}})
    with pytest.raises(DrydockError, match="GLUE's sst2 test split has no labels"):
        evaluate(str(tmp_path), glue, "test")
    synthetic = spec_from_dict({"name": "s", "task": {"name": "synthetic", "source": "synthetic"},
                                "teacher": {"model": "random", "tokenizer": {"vocab_size": 100}}})
    with pytest.raises(DrydockError, match="task synthetic has no test split"):
        evaluate(str(tmp_path), synthetic, "test")
    with pytest.raises(DrydockError, match="not an exported student folder"):
        evaluate(str(tmp_path / "missing"), synthetic, "dev")


# ----------------------------------------------------------------------------------------------
# the champion judged on the challenger's dev set (issue 21)
# ----------------------------------------------------------------------------------------------


def one_label_student(folder: Path, tokenizer, label: int) -> Path:
    """A student that answers `label` whatever the text: its score on a dev set is that label's share."""
    model = make_tiny_bert(2, seed=label)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([50.0, -50.0] if label == 0 else [-50.0, 50.0]))
    task = TaskInfo(name="reviews", num_labels=2, regression=False, label_names=("neg", "pos"))
    return save_student(model, tokenizer, folder, task, {"method": "kd"})


def test_the_champion_is_rescored_on_the_challengers_dev_set(store, tmp_path, tiny_tokenizer):
    from pipeline.select.stage import judging

    uri, client, experiment = store
    for folder in ("hard", "easy"):
        (tmp_path / folder).mkdir()
    hard, easy = files_spec(tmp_path / "hard"), files_spec(tmp_path / "easy")  # hard's dev: 3 pos to 1 neg
    (tmp_path / "easy" / "dev.csv").write_text("text,label\n" + "i hated every minute of it,neg\n" * 4)  # all negative
    name = hard.registered_model_name
    assert easy.registered_model_name == name
    messages: list[str] = []

    def round_on(spec, row):
        chosen = select(results_table.to_frame([row]), SelectionConfig())
        dev, rescore = judging(spec, uri, messages.append)
        return dev, register_front(uri, name, chosen.front, chosen.champion, sweep=spec.name, experiment_id=experiment,
                                   measurements={}, max_length=16, pair=False, dev=dev, rescore=rescore, log=messages.append)

    says_neg = one_label_student(tmp_path / "neg", tiny_tokenizer, 0)
    says_pos = one_label_student(tmp_path / "pos", tiny_tokenizer, 1)
    easy_dev, first = round_on(easy, trial("neg-s0", "kd", 0, 0.95, 4.0, says_neg, new_run(client, experiment, "n"), alpha=0.1))
    assert first.decision.moved and first.decision.version == "1"
    v1 = client.get_model_version(name, "1")
    assert {k: v1.tags[k] for k in ("eval_task", "eval_labels", "eval_data", "eval_split", "eval_examples")} == {
        "eval_task": "reviews", "eval_labels": '["neg", "pos"]', "eval_data": easy_dev.fingerprint, "eval_split": "dev",
        "eval_examples": "4"}

    # a retrain on a harder dev set: 0.80 there is refused against 0.95 from the easy set by the
    # recorded numbers; on the same rows the champion (always "neg") scores 0.25, the challenger 0.75
    hard_dev, second = round_on(hard, trial("pos-s0", "kd", 0, 0.80, 4.0, says_pos, new_run(client, experiment, "p"), alpha=0.2))
    assert hard_dev.fingerprint != easy_dev.fingerprint and hard_dev.examples == 12
    assert second.decision.moved and (second.decision.previous, second.decision.version) == ("1", "2")
    assert second.decision.reason == (f"accuracy 0.7500 beats the champion's 0.2500 on this sweep's dev set "
                                      f"(reviews dev, 12 examples, data {hard_dev.fingerprint}); it recorded 0.9500 on other data")
    assert str(client.get_model_version_by_alias(name, CHAMPION).version) == "2"
    v1, v2 = client.get_model_version(name, "1"), client.get_model_version(name, "2")
    # every number says which rows it came from; the old champion keeps its own
    assert v1.tags["eval_data"] == easy_dev.fingerprint and float(v1.tags["metric"]) == 0.95
    assert float(v1.tags[f"metric_on.{hard_dev.fingerprint}"]) == 0.25
    assert v2.tags["eval_data"] == hard_dev.fingerprint and float(v2.tags[f"metric_on.{hard_dev.fingerprint}"]) == 0.75
    assert f"registry: models:/{name}/1 scores accuracy 0.2500 on this sweep's dev set" in "\n".join(messages)

    # back on the easy set, the always-"neg" export (recorded 0.95 there) is offered again as a new
    # version: on the easy rows it scores 1.0 against the champion's 0.0, and takes the alias back
    _, third = round_on(easy, trial("neg2-s0", "kd", 0, 0.95, 4.0, one_label_student(tmp_path / "neg2", tiny_tokenizer, 0),
                                    new_run(client, experiment, "n2"), alpha=0.3))
    assert third.decision.moved and third.decision.version == "3"
    assert third.decision.reason.startswith("accuracy 1.0000 beats the champion's 0.0000 on this sweep's dev set")


# ----------------------------------------------------------------------------------------------
# runtime variants: the registry serves what was measured (issue #22, item 5)
# ----------------------------------------------------------------------------------------------


def test_the_champion_over_runtimes_is_registered_as_the_runtime_it_was_measured_in(store, tmp_path, tiny_tokenizer):
    from pipeline.measure.engines import build_variant

    uri, client, experiment = store
    a = stock_student(tmp_path / "a", tiny_tokenizer, seed=0)
    b = custom_student(tmp_path / "b", tiny_tokenizer)
    run_a, run_b = new_run(client, experiment, "kd"), new_run(client, experiment, "cofi")
    rows = [trial("kd-s0", "kd", 0, 0.80, 4.0, a, run_a, alpha=0.5), trial("cofi-s0", "cofi", 0, 0.75, 2.0, b, run_b, sparsity=0.9)]
    int8 = build_variant(a, "onnxruntime-int8", tmp_path / "variants" / "kd-s0")
    table = variants_of([
        variant("teacher", "torch", 0.85, 10.0, tmp_path / "teacher"),
        variant("kd-s0", "torch", 0.80, 4.0, a), variant("kd-s0", "onnxruntime-int8", 0.81, 2.0, int8.path),
        variant("cofi-s0", "torch", 0.75, 2.0, b),
        # on the front (the fastest), but its file is gone: logged, not registered, the others go on
        variant("cofi-s0", "onnxruntime-int8", 0.74, 1.0, tmp_path / "variants" / "cofi-s0" / "model.int8.onnx"),
    ])
    lines: list[str] = []
    chosen = select(results_table.to_frame(rows), SelectionConfig())

    def round_() -> object:
        return register_front(uri, "students", chosen.front, chosen.champion, sweep="test-sweep", experiment_id=experiment,
                              measurements={}, max_length=128, pair=False, budget=SelectionConfig(), log=lines.append,
                              variants_front=VariantFront(table, chosen.configs, SelectionConfig()))

    outcome = round_()
    # the eager front as before (v1 cofi, v2 kd: by latency), then the variants' front: kd in int8 (it dominates
    # kd eager and cofi eager) and cofi in int8 (faster), whose file is missing
    assert outcome.versions == {chosen.front.iloc[0]["config_key"]: "1", chosen.front.iloc[1]["config_key"]: "2"}
    assert outcome.variants == {"kd-s0/onnxruntime-int8": "3"}
    assert any("cofi" in line and "onnxruntime-int8 not registered" in line and "missing" in line for line in lines), lines
    assert outcome.decision.moved and outcome.decision.version == "3"
    tags = client.get_model_version("students", "3").tags
    assert {k: tags[k] for k in ("runtime", "shape", "device", "metric", "metric_fp32", "latency_ms", "flavor", "trial_id")} == {
        "runtime": "onnxruntime-int8", "shape": "32x64", "device": "cpu", "metric": "0.81", "metric_fp32": "0.8",
        "latency_ms": "2.0", "flavor": "onnx-pyfunc", "trial_id": "kd-s0"}
    assert tags["variant_path"] == str(int8.path) and tags["latency_batch_size"] == "32" and "code_sha256" not in tags
    assert client.get_model_version("students", "1").tags["runtime"] == "torch"
    from pipeline.cli.tables import registry_table_text

    listed = registry_table_text(client, "students")
    v3 = next(line for line in listed.splitlines() if line.count("│") > 5 and line.split("│")[1].strip() == "3")
    assert "onnxruntime-int8" in v3 and "accuracy 0.8100 (this export)" in v3 and "cpu, 2 threads, batch 32 × 64" in v3

    # again: nothing registered twice, the alias stays
    again = round_()
    assert again.variants == outcome.variants and not again.decision.moved
    assert sorted(int(v.version) for v in client.search_model_versions("name = 'students'")) == [1, 2, 3]

    # what a consumer of it gets, in a process without torch, transformers or drydock, and through
    # `mlflow models serve`: tests/integration/select/test_onnx_champion.py (logged by the same log_onnx_variant)


def test_variants_outside_the_budget_are_no_candidates(store, tmp_path, tiny_tokenizer):
    uri, client, experiment = store
    a = stock_student(tmp_path / "a", tiny_tokenizer, seed=0)
    rows = [trial("kd-s0", "kd", 0, 0.80, 4.0, a, new_run(client, experiment, "kd"), alpha=0.5),
            trial("kd-s1", "kd", 1, 0.70, 4.0, None, None, alpha=0.5)]
    budget = SelectionConfig(max_latency_ms=3.0)
    # the served export (kd-s0) is over the budget; kd-s1's variant is within it, but kd-s1 is not
    # a served export (its configuration serves kd-s0): never registered, never a candidate
    table = variants_of([variant("kd-s0", "torch", 0.80, 4.0, a), variant("kd-s1", "torch", 0.70, 1.0, a)])
    chosen = select(results_table.to_frame(rows), budget)
    lines: list[str] = []
    outcome = register_front(uri, "students", chosen.front, chosen.champion, sweep="test-sweep", experiment_id=experiment,
                             measurements={}, max_length=128, pair=False, budget=budget, log=lines.append,
                             variants_front=VariantFront(table, chosen.configs, budget))
    assert outcome.variants == {} and outcome.decision is None
    assert any("no runtime variant of a served export is within the budget" in line for line in lines), lines
    assert client.get_registered_model("students").aliases == {}


def test_a_half_precision_champion_is_served_cast_as_it_was_timed(store, tmp_path, tiny_tokenizer):
    import mlflow

    uri, client, experiment = store
    a = custom_student(tmp_path / "a", tiny_tokenizer)  # custom code too: the cast version keeps checking it
    rows = [trial("cofi-s0", "cofi", 0, 0.80, 4.0, a, new_run(client, experiment, "cofi"), sparsity=0.6)]
    # bf16 as accurate and faster: it takes eager fp32 off the front and is the champion
    table = variants_of([variant("cofi-s0", "torch", 0.80, 4.0, a), variant("cofi-s0", "torch-bf16", 0.80, 2.0, a, size=500)])
    chosen = select(results_table.to_frame(rows), SelectionConfig())
    lines: list[str] = []
    outcome = register_front(uri, "students", chosen.front, chosen.champion, sweep="test-sweep", experiment_id=experiment,
                             measurements={}, max_length=128, pair=False, budget=SelectionConfig(), log=lines.append,
                             variants_front=VariantFront(table, chosen.configs, SelectionConfig()))
    assert outcome.variants == {"cofi-s0/torch-bf16": "2"} and outcome.decision.version == "2", lines
    tags = client.get_model_version("students", "2").tags
    assert (tags["runtime"], tags["flavor"], tags["device"]) == ("torch-bf16", "pyfunc (bfloat16)", "cpu")
    assert tags["code_sha256"] == client.get_model_version("students", "1").tags["code_sha256"]
    with tracking(uri):
        served = mlflow.pyfunc.load_model("models:/students@champion")
    got = served.predict(["a truly wonderful film"])
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(a), trust_remote_code=True).eval().to(torch.bfloat16)
    with torch.no_grad():
        probs = model(**AutoTokenizer.from_pretrained(str(a))("a truly wonderful film", return_tensors="pt")).logits.float().softmax(-1)[0]
    assert got["label"][0] == model.config.id2label[int(probs.argmax())] and got["score"][0] == pytest.approx(float(probs.max()), abs=1e-6)
