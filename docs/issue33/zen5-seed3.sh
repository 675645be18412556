#!/bin/bash
# Issue 33 on Zen 5, a third session: zen5-seeds.sh's "after" side again
# with binary $1, alone on the machine (same data root, config and seed).
# $2 names the run (default after3; the fourth session's is after4).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
W=$RUNS/run13z5
B=$1
T=${2:-after3}
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
cd $W
lscpu | grep -E "Model name|^Flags" | cut -c1-200
echo "$(date -u) start $T: $B run13-replay.yaml, load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -v $B experiment --config "$REPO/docs/issue33/run13-replay.yaml" --data "$W/root" --name zen5-$T --out zen5-$T --seeds 41 > $T.log 2> $T.time || { echo "$T failed"; tail -20 $T.log; exit 1; }
echo "$(date -u) end $T, load $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E "Elapsed|User time|System time" $T.time
