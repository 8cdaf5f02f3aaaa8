#!/usr/bin/env bash
# GPU path checks: small `drydock sweep`s of sweeps/smoke.yaml that exercise what only runs on a
# CUDA GPU (bf16, DDP over NCCL, DeepSpeed ZeRO-2 and ZeRO-3 on CUDA, a multi-phase method under
# DeepSpeed, float32 exports of bf16 training, latency on cuda). The tests never need a GPU.
#
#     bash benchmarks/gpu_smoke.sh [WORKDIR]          # on a GPU machine; ~5-7 minutes
#     bash benchmarks/gpu_smoke.sh --check            # no GPU: validate every spec it would run
#                                                     # (the test suite runs this so it cannot rot);
#                                                     # exit 1 if one is invalid or not validated
#     bash benchmarks/gpu_smoke.sh --cpu [WORKDIR]    # rehearse the script itself on the CPU (slow;
#                                                     # proves nothing about GPUs)
#
# stdout is one line per check, `PASS <check>: <measured>`, `FAIL <check>: <reason>` or
# `SKIP <check>: <why>`, then `gpu_smoke: N passed, M failed, K skipped`; the exit status is 1 if
# any check failed. Checks, in order:
#   cuda     a CUDA GPU is visible: names, compute capability, native bf16 (8.0+), a bf16 matmul,
#            DeepSpeed's accelerator is cuda
#   ddp      DDP, bf16, 2 workers x 1 GPU (SKIP with fewer than 2 GPUs): the kd trial finished
#   zero2    DeepSpeed ZeRO-2 (cluster/deepspeed/zero2-bf16.json), train.bf16: auto (decided once
#            on the driver from the GPU type: its line shows the run's decision), grad_accumulation 2
#   theseus  a multi-phase method under DeepSpeed ZeRO-2: theseus, constant replacing rate 0.5 for
#            half of training, then successor fine-tuning (both rates seen in its MLflow run)
#   zero3    DeepSpeed ZeRO-3 (cluster/deepspeed/zero3-bf16.json), bf16
#   actor    one worker x 1 GPU trained in its Tune actor, no Ray Train job
#            (resources.trial_runner: tune-actor; the first GPU Ray gave the actor is its device):
#            the kd trial finished
#   export   every finished trial's student loads with transformers with float32 weights (the
#            safetensors, config.json and the loaded model) and its verification passed
#            (export_max_abs_diff recorded and within the verifier's 1e-4 tolerance: the
#            reference logits come from a float32 CPU copy of the model trained on cuda, the
#            verifier's own device and precision)
#   latency  every finished trial has a latency in results.parquet, measured on cuda
# A sweep check passes when its one trial finished with the strategy and world size asked for
# and the optimizer steps the spec implies. DeepSpeed trials use min(2, GPUs) workers.
#
# Each sweep's output goes to $GPU_SMOKE_LOGS (default WORKDIR/logs), named after the check.
# Time: GPU_SMOKE_BUDGET seconds for the whole script (default 450); a sweep gets at most
# GPU_SMOKE_SWEEP_TIMEOUT seconds (default 180) of what is left, and a check with too little time
# left is skipped. GPU_SMOKE_ONLY="zero2 zero3" runs only the sweep checks named (a rerun of those
# that failed, inside a lease's few minutes); the others are reported SKIP. The first sweep
# fine-tunes the teacher, which the others reuse from WORKDIR.
set -uo pipefail  # no -e: a failing check must not stop the others
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MODE=gpu
case "${1:-}" in
  --check) MODE=check; shift ;;
  --cpu) MODE=cpu; shift ;;
esac
WORKDIR=${1:-/tmp/drydock-gpu-smoke}
BUDGET=${GPU_SMOKE_BUDGET:-450}
SWEEP_CAP=${GPU_SMOKE_SWEEP_TIMEOUT:-180}
RESERVE=40    # seconds kept for the export and latency checks
MIN_SWEEP=45  # a sweep with less than this left is skipped, not started
CHECKS=(cuda ddp zero2 theseus zero3 actor export latency)
for only in ${GPU_SMOKE_ONLY:-}; do  # a misspelt name would skip every sweep and still pass
  case $only in ddp|zero2|theseus|zero3|actor) ;;
    *) echo "gpu_smoke: GPU_SMOKE_ONLY: '$only' is not a sweep check (ddp, zero2, theseus, zero3, actor)" >&2; exit 2 ;;
  esac
done

# One Python program for everything the checks read; `--check` compiles it, so it cannot rot.
read -r -d '' HELPER <<'PY'
import json, sys, time
from pathlib import Path

SWEEP_CHECKS = ("ddp", "zero2", "theseus", "zero3", "actor")


def say(kind, detail):
    print(f"{kind} {' '.join(str(detail).split())[:600]}")
    sys.exit(0)


def last_line(text):
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


PROGRESS = ("prepare:", "teacher:", "search:", "trial ", "latency:", "select:", "registry:")


def log_reason(log, timed_out=False):
    """The line of a sweep's output that says most about why it stopped: drydock's error, else the
    exception, else (and always when it timed out) the last progress line drydock printed."""
    path = Path(log)
    text = path.read_text(errors="replace") if path.is_file() else ""
    cut = text.find("SIGTERM received")  # what the sweep printed while it was being stopped
    if cut >= 0:
        text = text[:text.rfind("\n", 0, cut) + 1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    progress = [line for line in lines if line.startswith(PROGRESS)]
    # a heartbeat ("still working") names the stage only; the last real line names the step
    progress = [line for line in progress if "still working" not in line] or progress
    if timed_out:
        return progress[-1][:300] if progress else "no progress printed"
    import re

    for found in ([line for line in lines if line.startswith("error:")],
                  [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)], progress, lines):
        if found:
            return found[-1][:300]
    return "no output"


def this_run(sweep_dir, started):
    """(results, run dir, spec) of the sweep run this script started, or None."""
    import pandas as pd

    sweep_dir = Path(sweep_dir)
    results = sweep_dir / "results.parquet"
    if not results.is_file() or results.stat().st_mtime < started:
        return None
    run_dir = sweep_dir / "runs" / json.loads((sweep_dir / "state.json").read_text())["run_id"]
    return pd.read_parquet(results), run_dir, json.loads((run_dir / "spec.json").read_text())


def finished(frame):
    return frame[(frame["status"] == "finished").fillna(False)]


def mlflow_client(spec):
    from mlflow.tracking import MlflowClient

    return MlflowClient(spec["tracking"]["uri"])


def cuda():
    import torch

    if not torch.cuda.is_available():
        print(0)
        say("FAIL", f"torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no CUDA device")
    from collections import Counter

    from pipeline.training.engine import native_bf16

    n = torch.cuda.device_count()
    print(n)
    caps = [torch.cuda.get_device_capability(i) for i in range(n)]
    names = Counter(f"{torch.cuda.get_device_name(i)} (sm_{c[0]}{c[1]})" for i, c in enumerate(caps))
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    if not torch.isfinite((x @ x).float()).all():
        say("FAIL", "a bf16 matmul on cuda gave non-finite values")
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator().device_name()
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "?"
    detail = (f"{', '.join(f'{k} x{v}' for k, v in names.items())}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
              f"NCCL {nccl}, DeepSpeed accelerator {accelerator}")
    problems = [f"no native bf16 (compute capability {c[0]}.{c[1]} < 8.0)" for c in set(caps) if not native_bf16(c)]
    if accelerator != "cuda":
        problems.append(f"DeepSpeed's accelerator is {accelerator}, not cuda (DS_ACCELERATOR?)")
    say("FAIL" if problems else "PASS", ("; ".join(problems) + " -- " if problems else "native bf16, ") + detail)


def sweep(check, sweep_dir, started, rc, log, limit, seconds, strategy, workers):
    from pipeline.config import TrainConfig
    from pipeline.training.steps import total_steps

    where = f"(exit {rc}, {seconds}s; log {log})"
    if int(rc) in (124, 137):
        say("FAIL", f"timed out after {limit}s; last progress: {log_reason(log, timed_out=True)} {where}")
    got = this_run(sweep_dir, float(started))
    if got is None:
        say("FAIL", f"no results.parquet from this run: {log_reason(log)} {where}")
    frame, run_dir, spec = got
    if not len(frame):
        say("FAIL", f"the sweep ran no trial: {log_reason(log)} {where}")
    bad = frame[(frame["status"] != "finished").fillna(True)]
    if len(bad):
        row = bad.iloc[0]
        say("FAIL", f"trial {row['trial_id']} {row['status']}: {last_line(row['error']) or log_reason(log)} {where}")
    if int(rc) != 0:  # its trials finished, but a later stage (latency, report, registry) did not
        say("FAIL", f"the trials finished but the sweep did not: {log_reason(log)} {where}")
    train = TrainConfig.model_validate(spec["train"])
    if train.bf16 == "auto" and spec["resources"].get("use_gpu"):  # the run's spec.json holds the driver's decision
        say("FAIL", f"train.bf16 is still auto in the run's spec.json: the driver did not decide it {where}")
    task = spec["task"]
    expected_steps = total_steps(train, task["synthetic"]["num_train"]) if task["source"] == "synthetic" else None
    ds = spec["resources"]["deepspeed"]
    shown = []
    for _, row in frame.iterrows():
        outcome = json.loads((run_dir / "trials" / row["trial_id"] / "outcome.json").read_text())
        problems = []
        expected = "none" if strategy == "ddp" and int(workers) == 1 else strategy  # DDP alone is plain training
        if outcome.get("strategy") != expected:
            problems.append(f"strategy {outcome.get('strategy')}, expected {expected}")
        if outcome.get("world_size") != int(workers):
            problems.append(f"world size {outcome.get('world_size')}, expected {workers}")
        steps = int(outcome.get("steps") or 0)
        if expected_steps is not None and steps != expected_steps:
            problems.append(f"{steps} optimizer steps, expected {expected_steps}")
        if problems:
            say("FAIL", f"trial {row['trial_id']}: {'; '.join(problems)} {where}")
        how = strategy + (f" ZeRO-{ds['zero_stage']} ({Path(ds['preset']).name})" if strategy == "deepspeed" and ds.get("preset") else "")
        accumulation = f", grad_accumulation {train.grad_accumulation}" if train.grad_accumulation > 1 else ""
        per_step = 1000 * outcome["train_seconds"] / max(1, steps)
        text = (f"{row['method']} finished, {how} x{outcome['world_size']}, train.bf16={train.bf16}, {steps} steps"
                f"{accumulation}, {per_step:.0f} ms/step, {outcome['metric_name']} {outcome['metric']:.3f}")
        if row["method"] == "theseus":  # both phases ran: the constant rate, then 1 (successors alone)
            rates = [m.value for m in sorted(mlflow_client(spec).get_metric_history(row["mlflow_run_id"], "schedule/replacement_rate"),
                                             key=lambda m: m.step)]
            if not rates or min(rates) >= 1 or rates[-1] != 1:
                say("FAIL", f"theseus: replacement_rate at its evaluations {rates}, expected a rate < 1 then 1 {where}")
            text += f", replacement_rate {' -> '.join(f'{r:g}' for r in dict.fromkeys(rates))}"
        shown.append(text)
    say("PASS", f"{'; '.join(shown)}; sweep {seconds}s")


def export(started, *sweep_dirs):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging

    from pipeline.training.export import VERIFY_ATOL, VERIFY_FILE

    logging.set_verbosity_error()
    checked, diffs, problems = [], [], []
    for sweep_dir in sweep_dirs:
        got = this_run(sweep_dir, float(started))
        if got is None:
            continue
        frame, _, spec = got
        for _, row in frame[frame["error"].fillna("").str.contains("reloaded logits|without drydock|verification process")].iterrows():
            problems.append(f"{Path(sweep_dir).name}/{row['trial_id']}: verification failed: {last_line(row['error'])}")
        client = None
        for _, row in finished(frame).iterrows():
            name = f"{Path(sweep_dir).name}/{row['trial_id']}"
            path = Path(str(row["student_path"]))
            if not (path / "config.json").is_file():
                problems.append(f"{name}: no saved student at {path}")
                continue
            stored = set()
            for file in path.glob("*.safetensors"):
                with open(file, "rb") as f:
                    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
                stored |= {v["dtype"] for k, v in header.items() if k != "__metadata__"}
            config = json.loads((path / "config.json").read_text())
            declared = config.get("dtype") or config.get("torch_dtype")
            model = AutoModelForSequenceClassification.from_pretrained(str(path), trust_remote_code=True)
            loaded = {str(p.dtype).replace("torch.", "") for p in model.parameters()}
            if stored != {"F32"} or loaded != {"float32"} or declared not in (None, "float32"):
                problems.append(f"{name}: safetensors {sorted(stored)}, config {declared}, loads as {sorted(loaded)}")
            client = client or mlflow_client(spec)
            diff = client.get_run(row["mlflow_run_id"]).data.metrics.get("export_max_abs_diff")
            reference = path.parent / VERIFY_FILE
            scale = max(1.0, float(load_file(str(reference))["expected"].abs().max())) if reference.is_file() else 1.0
            if diff is None:
                problems.append(f"{name}: no export_max_abs_diff recorded (verification did not run)")
            elif diff > VERIFY_ATOL * scale:
                problems.append(f"{name}: export_max_abs_diff {diff:.3g} > {VERIFY_ATOL * scale:.0e}")
            else:
                diffs.append(diff)
            check = Path(sweep_dir).name.removeprefix("gpu-")
            checked.append(check if check == row["method"] else f"{check} {row['method']}")
    if problems:
        say("FAIL", "; ".join(problems))
    if not checked:
        say("SKIP", "no finished trial to check (see the sweep checks)")
    say("PASS", f"{len(checked)} students ({', '.join(checked)}) load with transformers {__import__('transformers').__version__} "
                f"as float32 (safetensors F32, config float32); export_max_abs_diff max {max(diffs):.2g} <= {VERIFY_ATOL:g}")


def latency(started, device, *sweep_dirs):
    import math

    students, teachers, problems = [], [], []
    for sweep_dir in sweep_dirs:
        got = this_run(sweep_dir, float(started))
        if got is None:
            continue
        frame, _, _ = got
        record_file = Path(sweep_dir) / "latency.json"
        record = json.loads(record_file.read_text()) if record_file.is_file() else {}
        if record.get("teacher"):
            teachers.append(record["teacher"]["p50_ms"])
        for _, row in finished(frame).iterrows():
            name = f"{Path(sweep_dir).name}/{row['trial_id']}"
            m = (record.get("students") or {}).get(row["trial_id"])
            ms = row["latency_ms"]
            if ms is None or (isinstance(ms, float) and math.isnan(ms)) or not ms > 0:
                reason = (record.get("errors") or {}).get(row["trial_id"], "no measurement")
                problems.append(f"{name}: no latency_ms ({last_line(reason)})")
            elif m is None or m["device"] != device:
                problems.append(f"{name}: measured on {m and m['device']}, expected {device}")
            else:
                students.append((float(ms), m))
    if problems:
        say("FAIL", "; ".join(problems))
    if not students:
        say("SKIP", "no finished trial to check (see the sweep checks)")
    ms = sorted(s for s, _ in students)
    m = students[0][1]
    teacher = f"; teacher p50 {min(teachers):.2f}-{max(teachers):.2f} ms" if teachers else ""
    say("PASS", f"{len(ms)} students timed on {device} ({m['device_name']}), batch {m['batch_size']} x {m['seq_length']}: "
                f"p50 {ms[0]:.2f}-{ms[-1]:.2f} ms{teacher}")


def validate(*args):
    """--check: each sweep check's spec validated in this one process (a `drydock validate` per
    check imported torch again each time). Args: CHECK SET... [--next CHECK SET...]; one line per
    check, `OK<tab>CHECK<tab>what validate printed` or `BAD<tab>CHECK<tab>its problems`."""
    import contextlib, io

    from pipeline.cli.main import main

    groups = [[]]
    for arg in args:
        if arg == "--next":
            groups.append([])
        else:
            groups[-1].append(arg)
    for check, *sets in (g for g in groups if g):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                rc = main(["validate", "sweeps/smoke.yaml", *sets])
            except SystemExit as e:  # argparse
                rc = e.code
        print(f"{'OK' if rc == 0 else 'BAD'}\t{check}\t{' '.join(out.getvalue().split())}")


if __name__ == "__main__":
    {"cuda": cuda, "sweep": sweep, "export": export, "latency": latency, "validate": validate}[sys.argv[1]](*sys.argv[2:])
PY

PASSED=0 FAILED=0 SKIPPED=0
report() {  # KIND CHECK DETAIL: the check's one line
  echo "$1 $2: $3"
  case $1 in PASS) PASSED=$((PASSED + 1)) ;; FAIL) FAILED=$((FAILED + 1)) ;; *) SKIPPED=$((SKIPPED + 1)) ;; esac
}
helper() {  # CHECK ARGS...: run the helper, report its last line (or why it gave none)
  local check=$1 out err line
  shift
  err=$(mktemp)
  out=$(timeout --kill-after=10 180 "$PY" -c "$HELPER" "$@" 2>"$err")
  line=$(tail -n 1 <<<"$out")
  if [[ $line =~ ^(PASS|FAIL|SKIP)\ (.*)$ ]]; then
    report "${BASH_REMATCH[1]}" "$check" "${BASH_REMATCH[2]}"
  else
    report FAIL "$check" "the check itself failed: $(grep -v '^\s*$' "$err" | tail -n 1 | cut -c1-300)"
  fi
  HELPER_OUT=$out
  rm -f "$err"
}

if [[ $MODE == check ]]; then
  VALID=0 INVALID=0
  verdict() {  # CHECK OK DETAIL
    if (( $2 )); then echo "valid $1: $3"; VALID=$((VALID + 1)); else echo "invalid $1: $3"; INVALID=$((INVALID + 1)); fi
  }
  if err=$("$PY" -c "import sys; compile(sys.argv[1], 'gpu_smoke helper', 'exec')" "$HELPER" 2>&1); then HELPER_OK=1; else HELPER_OK=0; fi
  verdict cuda "$HELPER_OK" "${err:-python check compiles}"
  GPUS=2 LOGS=/dev/null
else
  mkdir -p "$WORKDIR" && WORKDIR=$(cd "$WORKDIR" && pwd)
  LOGS=${GPU_SMOKE_LOGS:-$WORKDIR/logs}
  mkdir -p "$LOGS" && LOGS=$(cd "$LOGS" && pwd)
  STARTED=$(date +%s)
  if [[ $MODE == cpu ]]; then
    export DS_ACCELERATOR=cpu
    report SKIP cuda "--cpu rehearsal: the sweeps run on the CPU"
    GPUS=2
  else
    unset DS_ACCELERATOR  # DeepSpeed must find CUDA here
    helper cuda cuda
    GPUS=$(head -n 1 <<<"$HELPER_OUT")
    [[ $GPUS =~ ^[0-9]+$ ]] || GPUS=0
  fi
fi
WORKERS=$(( GPUS >= 2 ? 2 : 1 ))
DEVICE=$([[ $MODE == cpu ]] && echo cpu || echo cuda)
PRESETS=$PWD/cluster/deepspeed
COMMON=(--set train.bf16=on --set resources.use_gpu=$([[ $MODE == cpu ]] && echo false || echo true)
        --set resources.gpus_per_worker=1 --set resources.cpus_per_worker=1
        --set search.scheduler=fifo --set search.num_samples=1 --set "seeds=[0]"
        --set task.synthetic.num_train=256 --set train.epochs=1 --set train.eval_every=8
        --set teacher.finetune.epochs=2
        --set selection.latency.device=$DEVICE
        --set "tracking.uri=sqlite:///$WORKDIR/mlflow.db" --set tracking.experiment=gpu-smoke
        --set tracking.registered_model=gpu-smoke-student
        --set "methods={kd: {alpha: 0.5}}")
SWEEP_DIRS=()
declare -A OWN=()   # --check: each sweep check's own settings, for its line
TO_VALIDATE=()      # --check: CHECK ARGS... --next ..., validated in one process
ASKED=()            # --check: the sweep checks, in order, each of which must get its line

sweep_check() {  # CHECK STRATEGY WORKERS [--set ...]: one small sweep, one line
  local check=$1 strategy=$2 workers=$3
  shift 3
  local name=gpu-$check log=$LOGS/$check.log
  local args=("${COMMON[@]}" --set "name=$name" --set "resources.strategy=$strategy"
              --set "resources.workers_per_trial=$workers" "$@")
  if [[ $MODE == check ]]; then  # validated together, by validate_checks
    local own="${args[*]:${#COMMON[@]}}"
    own=${own//--set /}
    OWN[$check]=${own//$PRESETS/cluster/deepspeed}
    TO_VALIDATE+=("$check" "${args[@]}" --next)
    ASKED+=("$check")
    return
  fi
  if [[ -n ${GPU_SMOKE_ONLY:-} && " $GPU_SMOKE_ONLY " != *" $check "* ]]; then
    report SKIP "$check" "not in GPU_SMOKE_ONLY=$GPU_SMOKE_ONLY"; return
  fi
  if (( GPUS == 0 )); then report SKIP "$check" "no CUDA GPU (see cuda)"; return; fi
  if (( workers > GPUS )) && [[ $MODE == gpu ]]; then
    report SKIP "$check" "needs $workers GPUs, $GPUS visible"; return
  fi
  local left=$(( BUDGET - SECONDS - RESERVE ))
  if (( left < MIN_SWEEP )); then
    report SKIP "$check" "out of time (${SECONDS}s used of GPU_SMOKE_BUDGET=${BUDGET}s)"; return
  fi
  local limit=$(( left < SWEEP_CAP ? left : SWEEP_CAP )) t0=$SECONDS rc=0
  timeout --kill-after=20 "$limit" "$PY" -m pipeline.cli sweep sweeps/smoke.yaml --workdir "$WORKDIR" "${args[@]}" \
    >"$log" 2>&1 </dev/null || rc=$?
  SWEEP_DIRS+=("$WORKDIR/$name")
  helper "$check" sweep "$check" "$WORKDIR/$name" "$STARTED" "$rc" "$log" "$limit" "$((SECONDS - t0))" "$strategy" "$workers"
}

sweep_check ddp ddp 2
sweep_check zero2 deepspeed "$WORKERS" --set resources.deepspeed.zero_stage=2 \
  --set "resources.deepspeed.preset=$PRESETS/zero2-bf16.json" --set train.grad_accumulation=2 --set train.bf16=auto
sweep_check theseus deepspeed "$WORKERS" --set resources.deepspeed.zero_stage=2 \
  --set "resources.deepspeed.preset=$PRESETS/zero2-bf16.json" \
  --set "methods={theseus: {schedule: constant, base_rate: 0.5, replacing_fraction: 0.5}}"
sweep_check zero3 deepspeed "$WORKERS" --set resources.deepspeed.zero_stage=3 \
  --set "resources.deepspeed.preset=$PRESETS/zero3-bf16.json"
sweep_check actor ddp 1 --set resources.trial_runner=tune-actor

if [[ $MODE == check ]]; then
  # The validating process prints one `OK|BAD<tab>CHECK<tab>...` line per sweep check. A check it
  # printed no line for (it crashed, was killed, or skipped one) is invalid, named with the
  # process's exit status and its last other line: a missing line must not pass by not counting.
  VALIDATED=$("$PY" -c "$HELPER" validate "${TO_VALIDATE[@]}" 2>&1)
  VALIDATE_RC=$?
  TAB=$'\t'
  LINE_RE="^(OK|BAD)${TAB}([^${TAB}]+)${TAB}(.*)$"
  declare -A SAID=()
  OTHER=""  # the last line that is no check's, to say why one is missing
  while IFS= read -r line; do
    if [[ $line =~ $LINE_RE ]] && [[ -n ${OWN[${BASH_REMATCH[2]}]+set} && -z ${SAID[${BASH_REMATCH[2]}]+set} ]]; then
      SAID[${BASH_REMATCH[2]}]="${BASH_REMATCH[1]}${TAB}${BASH_REMATCH[3]}"
    elif [[ -n ${line//[[:space:]]/} ]]; then
      OTHER=$line
    fi
  done <<<"$VALIDATED"
  for check in "${ASKED[@]}"; do
    said=${SAID[$check]:-}
    if [[ -z $said ]]; then
      verdict "$check" 0 "the validating process printed no line for it (exit $VALIDATE_RC${OTHER:+; last output: ${OTHER:0:300}})"
    elif [[ ${said%%"$TAB"*} == OK ]]; then
      out=${said#*"$TAB"}
      verdict "$check" 1 "${out#*: valid } with ${OWN[$check]}"
    else
      verdict "$check" 0 "${said#*"$TAB"}"
    fi
  done
  verdict export "$HELPER_OK" "${err:-python check compiles; reads each sweep results, students and MLflow runs}"
  verdict latency "$HELPER_OK" "${err:-python check compiles; reads each sweep results.parquet and latency.json}"
  echo "gpu_smoke --check: $VALID valid, $INVALID invalid"
  (( INVALID == 0 ))
  exit
fi
if (( ${#SWEEP_DIRS[@]} )); then
  helper export export "$STARTED" "${SWEEP_DIRS[@]}"
  helper latency latency "$STARTED" "$DEVICE" "${SWEEP_DIRS[@]}"
else
  report SKIP export "no sweep ran"
  report SKIP latency "no sweep ran"
fi
echo "gpu_smoke: $PASSED passed, $FAILED failed, $SKIPPED skipped"
(( FAILED == 0 ))
