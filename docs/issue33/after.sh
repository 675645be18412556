#!/bin/bash
# Issue 33, 2026-12-04: wait for run 15's last grid, then (machine idle)
# BenchmarkGenerateShared (copy vs share in one run), then the whole
# seed 41 of run 13's recipe with binary afa9af1 (seed.sh).
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
cd "$REPO"
while pgrep -f 'mlerl-2647e0e experiment' > /dev/null; do sleep 10; done
echo "$(date -u) run 15 done; load $(cut -d' ' -f1-3 /proc/loadavg)"
lscpu | grep -E "Model name|^Flags" | cut -c1-200
GOEXPERIMENT=simd go test -run XXX -bench 'GenerateShared' -benchtime 2x -count 3 ./policy/native/ 2>&1 | grep -E "^Benchmark|^cpu"
echo "$(date -u) bench done"
bash "$REPO/docs/issue33/seed.sh" "$RUNS/issue33/mlerl-afa9af1"
