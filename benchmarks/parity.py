"""How far each runtime variant's logits are from eager fp32, and what it costs in memory: the
measurements behind `pipeline.measure.runtimes.TOLERANCES` and the peak-memory figures.

    .venv/bin/python benchmarks/parity.py [--teacher runs/teachers/<key>] [--runtimes torch,onnxruntime,...] [--out DIR]

For three tiny random models built offline (a 4 × 32 BERT, a 2 × 128 BERT with a 1,000-word
vocabulary, a CoFi-pruned BERT) on 256 random rows of 4-63 tokens, and for `--teacher` (a
fine-tuned folder: the SST-2 dev set, tokenized to 128) on its 872 dev sentences, every variant
is built (`build_variant`), run with 1 intra-op thread over all rows in batches of 32
(`predict_logits`), and compared with eager fp32: max |logit − fp32| (p99), as a fraction of the
logit scale, argmax agreement, the teacher's dev accuracy, the seconds the whole pass took (load
included: a rough figure, not a latency) and the variant's peak memory at batch 32 × 64
(`measure_peak_memory`, twice: the spread is part of the figure).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GLUE_DEV = ROOT.parent / "shared" / "data" / "glue" / "SST-2" / "dev.tsv"


def random_rows(vocab: int, n: int = 256, seed: int = 0) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(seed)
    return [{"input_ids": [int(x) for x in rng.integers(5, vocab, int(rng.integers(4, 64)))]} for _ in range(n)]


def tiny_models(out: Path) -> list[tuple[str, Path, list[dict[str, list[int]]]]]:
    import torch

    from methods._pruned_bert import PrunedBertConfig, PrunedBertForSequenceClassification
    from methods.base import TaskInfo
    from pipeline.prepare.text_tokenizer import train_wordpiece
    from pipeline.training.export import save_student
    from tests.conftest import TINY_TEXTS, make_tiny_bert

    models = []
    folder = out / "tiny4x32"
    make_tiny_bert(seed=0).save_pretrained(folder)
    models.append(("tiny BERT 4 x 32 (random)", folder, random_rows(100)))
    folder = out / "tiny2x128"
    make_tiny_bert(num_layers=2, vocab_size=1000, hidden_size=128, intermediate_size=512, seed=2).save_pretrained(folder)
    models.append(("tiny BERT 2 x 128, vocab 1000 (random)", folder, random_rows(1000)))
    torch.manual_seed(4)
    config = PrunedBertConfig(vocab_size=100, hidden_size=21, pooler_size=32, attention_head_size=8, layer_heads=[2, 4, 0, 4],
                              layer_intermediate=[53, 0, 53, 53], max_position_embeddings=128, num_labels=2)
    task = TaskInfo(name="sst2", num_labels=2, regression=False, label_names=("negative", "positive"))
    folder = save_student(PrunedBertForSequenceClassification(config).eval(), train_wordpiece(TINY_TEXTS * 4, vocab_size=100),
                          out / "cofi", task, {"method": "cofi"})
    models.append(("CoFi pruned tiny BERT (random)", folder, random_rows(100)))
    return models


def teacher_rows(folder: Path) -> tuple[list[dict[str, list[int]]], np.ndarray]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    with open(GLUE_DEV) as f:
        data = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    encoded = tokenizer([d["sentence"] for d in data], truncation=True, max_length=128, return_token_type_ids=True)
    rows = [{"input_ids": i, "token_type_ids": t} for i, t in zip(encoded["input_ids"], encoded["token_type_ids"])]
    return rows, np.array([int(d["label"]) for d in data])


def compare(name: str, folder: Path, rows: list, runtimes: list[str], out: Path, labels: np.ndarray | None) -> None:
    import json

    from pipeline.measure.engines import build_variant, load_runner, measure_peak_memory, predict_logits
    from pipeline.measure.job import latency_inputs
    from pipeline.measure.runtimes import EAGER

    config = json.loads((folder / "config.json").read_text())
    logits, seconds, memory = {}, {}, {}
    for runtime in [EAGER, *[r for r in runtimes if r != EAGER]]:
        variant = build_variant(folder, runtime, out / "variants" / folder.name)
        started = time.perf_counter()
        logits[runtime] = predict_logits(load_runner(variant, 1), rows, 32)
        seconds[runtime] = time.perf_counter() - started
        peaks = [measure_peak_memory(variant, 1, latency_inputs(config, 32, 64)).bytes for _ in range(2)]
        memory[runtime] = "/".join("n/a" if p is None else f"{p / 1e6:.3g}" for p in peaks)
    reference = logits[EAGER]
    scale = max(1.0, float(np.abs(reference).max()))
    print(f"{name}  (max |logit| {np.abs(reference).max():.3g})")
    for runtime, got in logits.items():
        diff = np.abs(got - reference)
        line = (f"  {runtime:17s} max {diff.max():.2g} (p99 {np.quantile(diff, 0.99):.2g}) = {diff.max() / scale:.2g} x scale, "
                f"argmax = fp32 {(got.argmax(1) == reference.argmax(1)).mean():.1%}, {seconds[runtime]:.1f} s, peak MB {memory[runtime]}")
        if labels is not None:
            line += f", accuracy {(got.argmax(1) == labels).mean():.4f}"
        print(line, flush=True)


def main() -> int:
    from pipeline.measure.runtimes import NAMES as RUNTIMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, default=None, help="a fine-tuned SST-2 folder, scored on the dev set")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--out", type=Path, default=None, help="for the tiny models and the ONNX files (default: a temporary folder)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    runtimes = args.runtimes.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        for name, folder, rows in tiny_models(out):
            compare(name, folder, rows, runtimes, out, None)
        if args.teacher is not None:
            rows, labels = teacher_rows(args.teacher)
            compare(f"fine-tuned teacher {args.teacher}", args.teacher, rows, runtimes, out, labels)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
