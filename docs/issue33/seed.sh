#!/bin/bash
# Issue 33: one whole seed of run 13's recipe (seed 41, its data root and
# config) with today's binary, machine otherwise idle: the "after" of run
# 13's seed 41 (binary cc699e0, 42 min 27 s).
set -e
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
cd "$RUNS/run13"
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
B=$1
lscpu | grep -E "Model name|^Flags" | cut -c1-160
echo "$(date -u) start $B, load $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$RUNS/issue33"
/usr/bin/time -v $B experiment --config "$REPO/docs/run13/run13.yaml" --data "$RUNS/run13/root" --name issue33-after --out issue33-after --seeds 41 > "$RUNS/issue33/seed.log" 2>&1
echo "$(date -u) end, load $(cut -d' ' -f1-3 /proc/loadavg)"
