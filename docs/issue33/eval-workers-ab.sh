#!/bin/bash
# Issue 33, a seventh session: the seed's SFT+PPO evaluation again with
# --workers 2, 4, 4, 2 ((method, task) jobs in parallel), same binary,
# each into its own output; then every run's rows compared with the
# first's (scores and actions must be the same whatever the workers).
#   docs/issue33/eval-workers-ab.sh RUN_DIR CELL    (e.g. $RUNS/run13z5/zen5-after7 s41-sft+ppo)
# (scratch logs and rows go to $RUNS/evalab*)
set -euo pipefail
D=$1 C=${2:-s41-sft+ppo}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
mkdir -p "$RUNS"
LOG=$(ls "$D"/logs/"$C"-evaluate.log)
read -r _ BIN ARGS < <(head -1 "$LOG")
ARGS=$(echo "$ARGS" | sed -E "s/--out [^ ]+//; s/--report [^ ]+//")
lscpu | grep -E "Model name|^Flags" | cut -c1-200
echo "command: $BIN $ARGS"
i=0
for w in 2 4 4 2; do
	i=$((i + 1))
	OUT=evalab-$i-w$w
	# --out and --report replaced (later flags win), --workers added.
	echo -n "$(date -u +%H:%M:%S) run $i workers=$w load $(cut -d' ' -f1 /proc/loadavg): "
	/usr/bin/time -f "%e s wall, %U+%S s CPU" $BIN $ARGS --out $OUT --report "$RUNS/evalab/$OUT" --workers $w > "$RUNS/evalab-$i.log" 2>&1 || { tail -5 "$RUNS/evalab-$i.log"; exit 1; }
	tail -1 "$RUNS/evalab-$i.log"
done
# The rows: every field but the timings and run_id (it names the output) must match run 1's.
DATA=$(echo "$ARGS" | sed -E 's/.*--data ([^ ]+).*/\1/')
for j in 1 2 3 4; do
	w=$(sed -n "${j}p" <<< $'2\n4\n4\n2')
	$BIN head --json -n 1000000 "$DATA/evalab-$j-w$w" > "$RUNS/evalab-rows-$j.jsonl"
done
python3 - "$RUNS" <<'PY'
import json, sys
def rows(j):
    out = {}
    for line in open(f"{sys.argv[1]}/evalab-rows-{j}.jsonl"):
        r = json.loads(line)
        key = (r.get("method"), r.get("task_id"), r.get("trajectory"))
        out[key] = {k: v for k, v in r.items() if k not in ("run_id", "wall_s", "generate_s", "wait_s", "execute_s")}
    return out
base = rows(1)
for j in (2, 3, 4):
    other = rows(j)
    diff = [k for k in base if base[k] != other.get(k)]
    print(f"run {j}: {len(other)} rows, {len(diff)} differ from run 1's {len(base)}" + (f": {diff[:5]}" if diff else ""))
PY
