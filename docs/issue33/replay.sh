#!/bin/bash
# Issue 33: the whole seed 41 of run 13's recipe with the timeout replay on
# (--env.exec_cache_timeouts in train ppo and evaluate), binary $1, idle.
set -e
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
cd "$RUNS/run13"
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
B=$1; N=$2
lscpu | grep -E "Model name|^Flags" | cut -c1-200
echo "$(date -u) start $B, load $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$RUNS/issue33"
/usr/bin/time -v $B experiment --config "$REPO/docs/issue33/run13-replay.yaml" --data "$RUNS/run13/root" --name $N --out $N --seeds 41 > "$RUNS/issue33/$N.log" 2>&1
echo "$(date -u) end, load $(cut -d' ' -f1-3 /proc/loadavg)"
