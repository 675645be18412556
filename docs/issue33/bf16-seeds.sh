#!/bin/bash
# Issue 33, the second loss-curve check (declared in BENCHMARKS.md before
# it ran): the demo recipe's SFT with float32 and with bf16 products on
# three fresh seeds (2, 3, 4: initialisation and data order), on the data
# root of the first check, then bf16-seeds.py compares the curves.
#   docs/issue33/bf16-seeds.sh DATA [BIN]
set -euo pipefail
D=$1
B=${2:-bin/mlerl}
STEPS=${STEPS:-300}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
lscpu | grep -E "Model name|^Flags" | cut -c1-200
echo "$(date -u) start, binary $B (repository at $(git -C "$REPO" rev-parse --short HEAD)), load $(cut -d' ' -f1-3 /proc/loadavg)"
for seed in 2 3 4; do
	for mode in fp32 bf16; do
		/usr/bin/time -f "seed $seed sft $mode: %e s wall, %U s user, %S s system" \
			$B train sft --data "$D" --out "checkpoints/sft-$mode-s$seed" --seed "$seed" --matmul "$mode" \
			--max_steps "$STEPS" --epochs "${EPOCHS:-12}" --resume=false 2>&1 |
			grep -v '^\s*$' | grep -E "^seed |matmul" || true
	done
done
python3 "$(dirname "$0")/bf16-seeds.py" "$D/checkpoints" 2 3 4
echo "$(date -u) end, load $(cut -d' ' -f1-3 /proc/loadavg)"
