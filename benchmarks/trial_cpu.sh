#!/bin/bash
# Where a trial's CPU goes: the smoke sweep (FIFO, 3 trials) with every process's CPU time read
# from /proc every 0.25 s, summed per process title (Ray's `ray::<Actor>`); only the processes of
# that sweep's Ray session and of this checkout are counted. benchmarks/RESULTS.md, "Where a
# trial's CPU goes, and trials in their Tune actors".
#   bash benchmarks/trial_cpu.sh ray-train|tune-actor OUTDIR
set -u
runner=$1; out=$2; root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out"; mkdir -p "$out"
python3 - "$out/done" "$out/cpu.json" <<'PY' &
import json, os, sys, time
clk, seen = os.sysconf("SC_CLK_TCK"), {}
while not os.path.exists(sys.argv[1]):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parts = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:120]
            seen[pid] = (cmd, (int(parts[11]) + int(parts[12])) / clk, os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
    time.sleep(0.25)
json.dump(seen, open(sys.argv[2], "w"))
PY
sampler=$!
cd "$root" && /usr/bin/time -v .venv/bin/drydock sweep sweeps/smoke.yaml --workdir "$out/w" \
  --set resources.trial_runner="$runner" --set search.scheduler=fifo > "$out/sweep.log" 2>&1
touch "$out/done"; wait $sampler
session=$(ls -d /tmp/ray/session_2* | sort | tail -1)
python3 - "$out/cpu.json" "$session" "$root" <<'PY'
import collections, json, re, sys
seen, session, root = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
total = collections.defaultdict(lambda: [0, 0.0])
for cmd, cpu, cwd in seen.values():
    if cpu >= 0.05 and (cwd.startswith(session) or cwd.startswith(root)):
        key = cmd.split()[0] if cmd.startswith("ray::") else re.sub(r"\s--.*", "", cmd)[:60]
        total[key][0] += 1
        total[key][1] += cpu
for key, (n, cpu) in sorted(total.items(), key=lambda kv: -kv[1][1])[:14]:
    print(f"{cpu:7.1f} s  {n:3d}  {key}")
PY
grep -E "Elapsed" "$out/sweep.log"
