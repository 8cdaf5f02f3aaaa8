#!/usr/bin/env bash
# The 3-seed SST-2 method tables of benchmarks/RESULTS.md (issues 4, 5, 6), one sweep per group
# of configurations, all in one workdir so the fine-tuned teacher is made once and shared.
#   GLUE_DIR=../shared/data/glue benchmarks/tables/run.sh WORKDIR [SPEC-NAME ...]
# then: python benchmarks/tables/summarize.py WORKDIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
workdir="$1"; shift
specs=("$@")
[ ${#specs[@]} -gt 0 ] || specs=(table-baselines table-theseus-linear table-minilm table-dcr table-theseus-constant table-theseus-anti table-cofi)
for s in "${specs[@]}"; do
  echo "=== $s $(date -Is)"
  drydock sweep "$here/$s.yaml" --workdir "$workdir" || echo "=== $s exited $?"
done
echo "=== done $(date -Is)"
