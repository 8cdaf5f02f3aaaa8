#!/usr/bin/env bash
# Print a manifest with its ${DRYDOCK_*} placeholders filled from the environment:
#
#   cluster/render.sh cluster/k8s/raycluster.yaml | kubectl apply -f -
#   cluster/render.sh cluster/ray/gpu-cluster.yaml > drydock-gpu.yaml && ray up drydock-gpu.yaml
#
# Only DRYDOCK_* variables are substituted (the placeholders are names, buckets, images, hosts:
# never credentials, which come from Kubernetes secrets or the cloud's secret store). Any other
# $VAR or $(VAR) is left for the shell or Kubernetes. If a placeholder's variable is unset or
# empty, nothing is printed and the exit status is 2. Needs envsubst (GNU gettext).
set -euo pipefail

if [[ $# -ne 1 || ! -f $1 ]]; then
  echo "usage: cluster/render.sh MANIFEST" >&2
  exit 2
fi
manifest=$1

names=$(grep -o '\${DRYDOCK_[A-Z0-9_]*}' "$manifest" | tr -d '${}' | sort -u || true)
missing=()
for name in $names; do
  [[ -n ${!name:-} ]] || missing+=("$name")
done
if ((${#missing[@]})); then
  echo "render: set ${missing[*]} before rendering $manifest (see cluster/README.md)" >&2
  exit 2
fi

if [[ -z $names ]]; then
  cat "$manifest"
else
  envsubst "$(printf '${%s} ' $names)" <"$manifest"
fi
