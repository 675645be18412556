#!/bin/bash
# Issue 33 on Zen 5, a fourth session: zen5-seeds.sh's "after" side again
# with binary $1, alone on the machine (same data root, config and seed).
set -euo pipefail
W=/work/data/run13z5
B=$1
export GOEXPERIMENT=simd MLERL_DEPS=/work/main/.deps
cd $W
lscpu | grep -E "Model name|^Flags" | cut -c1-200
echo "$(date -u) start after4: $B run13-replay.yaml, load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -v $B experiment --config run13-replay.yaml --name zen5-after4 --out zen5-after4 --seeds 41 > after4.log 2> after4.time || { echo "after4 failed"; tail -20 after4.log; exit 1; }
echo "$(date -u) end after4, load $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E "Elapsed|User time|System time" after4.time
