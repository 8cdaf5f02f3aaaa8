"""`drydock train` end to end on the real SST-2 files with a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def sst2_spec(tmp_path: Path, glue_dir: Path) -> Path:
    spec = {
        "name": "sst2-tiny",
        "task": {"name": "sst2", "source": "glue_dir", "glue_dir": str(glue_dir), "max_seq_length": 32,
                 "max_train_samples": 1024, "max_eval_samples": 256},
        "teacher": {"model": "random", "architecture": {"num_layers": 4, "hidden_size": 32, "num_heads": 4, "intermediate_size": 64},
                    "tokenizer": {"vocab_size": 1000}, "finetune": {"epochs": 1, "batch_size": 32, "learning_rate": 2e-3}},
        "student": {"num_layers": 2},
        "train": {"epochs": 1, "batch_size": 32, "learning_rate": 2e-3, "eval_every": 16, "progress_bar": False},
        "methods": {"kd": {"alpha": 0.5, "temperature": 2.0}},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_drydock_train_on_sst2_writes_metrics_and_a_reloadable_student(tmp_path, glue_dir):
    spec = sst2_spec(tmp_path, glue_dir)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "train", str(spec), "--method", "kd", "--output", str(out),
         "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("metric_name", "metric", "metrics", "teacher_metric", "num_params", "num_params_encoder", "train_seconds", "steps"):
        assert key in metrics, key
    assert metrics["metric_name"] == "accuracy" and 0.0 <= metrics["metric"] <= 1.0
    assert metrics["steps"] == 32  # 1024 examples / batch 32, one epoch
    assert metrics["num_params_encoder"] < metrics["num_params"]
    assert metrics["export_max_abs_diff"] <= 1e-4
    student = out / "student"
    assert json.loads((student / "config.json").read_text())["num_hidden_layers"] == 2
    assert json.loads((student / "drydock.json").read_text())["method"] == "kd"

    # a consumer process where drydock cannot be imported predicts the same labels as drydock
    script = textwrap.dedent(f"""
        import sys, json
        sys.modules["pipeline"] = None; sys.modules["methods"] = None
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        tok = AutoTokenizer.from_pretrained({str(student)!r})
        model = AutoModelForSequenceClassification.from_pretrained({str(student)!r}).eval()
        texts = ["a gorgeous , witty , seductive movie .", "the acting is terrible and the plot is worse ."]
        with torch.no_grad():
            logits = model(**tok(texts, return_tensors="pt", padding=True)).logits
        print(json.dumps([model.config.id2label[i] for i in logits.argmax(-1).tolist()] + [logits.tolist()]))
    """)
    consumer = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert consumer.returncode == 0, consumer.stderr[-2000:]
    *labels, consumer_logits = json.loads(consumer.stdout)
    assert set(labels) <= {"negative", "positive"}

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(student)
    model = AutoModelForSequenceClassification.from_pretrained(student).eval()
    texts = ["a gorgeous , witty , seductive movie .", "the acting is terrible and the plot is worse ."]
    with torch.no_grad():
        ours = model(**tok(texts, return_tensors="pt", padding=True)).logits
    torch.testing.assert_close(torch.tensor(consumer_logits), ours, atol=1e-5, rtol=1e-5)


def test_train_with_a_bad_spec_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "task": {"name": "sst2", "source": "glue_dir", "glue_dir": str(tmp_path / "nowhere")},
                                   "teacher": {"model": "random", "tokenizer": {}}, "methods": {"kd": {}}}))
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "train", str(bad), "--method", "kd", "--output", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: ")
