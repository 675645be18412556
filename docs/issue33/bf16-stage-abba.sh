#!/bin/bash
# Issue 33: the demo recipe's SFT stage (seed 1, 300 updates, the first
# check's data root), float32 and bf16 in the order fp32, bf16, bf16, fp32
# (ABBA: a drift of the host falls on both sides alike), each timed.
#   docs/issue33/bf16-stage-abba.sh DATA [BIN]
set -euo pipefail
D=$1
B=${2:-bin/mlerl}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
lscpu | grep -E "Model name|^Flags" | cut -c1-200
echo "$(date -u) start, binary $B (repository at $(git -C "$REPO" rev-parse --short HEAD)), load $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
for mode in fp32 bf16 bf16 fp32; do
	i=$((i + 1))
	/usr/bin/time -f "run $i sft $mode: %e s wall, %U s user, %S s system" \
		$B train sft --data "$D" --out "checkpoints/abba-$i-$mode" --matmul "$mode" --max_steps 300 --epochs 12 --resume=false 2>&1 |
		grep -E "^run " || true
done
echo "$(date -u) end, load $(cut -d' ' -f1-3 /proc/loadavg)"
