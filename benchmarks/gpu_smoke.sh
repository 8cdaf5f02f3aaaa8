#!/usr/bin/env bash
# GPU path check: on a machine with a CUDA GPU, a two-trial sweep with bf16, DDP over NCCL and
# DeepSpeed ZeRO-2, printing step times. The tests never need a GPU; this exercises the code paths
# that only run on one (bf16 autocast, NCCL, DeepSpeed's CUDA accelerator, latency on cuda).
#
#     bash benchmarks/gpu_smoke.sh [WORKDIR]
#     bash benchmarks/gpu_smoke.sh --check    # validate the two sweeps' specs only (no GPU needed;
#                                             # the test suite runs this so the script cannot rot)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
CHECK=0
if [[ "${1:-}" == "--check" ]]; then CHECK=1; shift; fi
WORKDIR=${1:-/tmp/drydock-gpu-smoke}

if (( CHECK )); then
  WORKERS=2
else
  unset DS_ACCELERATOR  # DeepSpeed must find CUDA here
  "$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA GPU visible: this script checks the GPU paths"
print(f"GPU: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, bf16: {torch.cuda.is_bf16_supported()}")
PY
  GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
  WORKERS=$(( GPUS >= 2 ? 2 : 1 ))
fi
COMMON=(--set train.bf16=on --set resources.use_gpu=true --set resources.gpus_per_worker=1
        --set resources.workers_per_trial=$WORKERS --set search.scheduler=fifo --set selection.latency.device=cuda
        --set "methods={finetune: {}, kd: {alpha: 0.5}}")
for strategy in ddp deepspeed; do
  ARGS=("${COMMON[@]}" --set name=gpu-$strategy --set resources.strategy=$strategy --set resources.deepspeed.zero_stage=2)
  if (( CHECK )); then
    "$PY" -m pipeline.cli validate sweeps/smoke.yaml "${ARGS[@]}"
    continue
  fi
  echo "== $strategy, $WORKERS worker(s), bf16 =="
  "$PY" -m pipeline.cli sweep sweeps/smoke.yaml --workdir "$WORKDIR/$strategy" "${ARGS[@]}"
done
(( CHECK )) && exit 0
"$PY" - "$WORKDIR" <<'PY'
import json, pathlib, sys
for outcome in sorted(pathlib.Path(sys.argv[1]).glob("*/gpu-*/runs/*/trials/*/outcome.json")):
    o = json.loads(outcome.read_text())
    if o.get("status") != "finished":
        print(outcome.parent.name, o.get("status"), o.get("error")); continue
    per_step = 1000 * o["train_seconds"] / max(1, o["steps"])
    print(f"{outcome.parent.name}: {o['strategy']} x{o['world_size']} {o['steps']} steps, {per_step:.1f} ms/step, metric {o['metric']:.4f}")
PY
