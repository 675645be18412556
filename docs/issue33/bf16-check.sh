#!/bin/bash
# Issue 33: bf16 against fp32 on the demo recipe. The demo's data stages
# once, then the same SFT (same data, seed, steps) twice, --matmul fp32 and
# --matmul bf16, each timed; the step-by-step losses are compared
# (bf16-compare.py), then each checkpoint is evaluated held-out and held-in
# as the demo evaluates (sft only).
#   docs/issue33/bf16-check.sh DATA [BIN]
set -euo pipefail
D=$1
B=${2:-bin/mlerl}
STEPS=${STEPS:-300}
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$PWD/.deps}
lscpu | grep -E "Model name|^Flags" | cut -c1-200
echo "$(date -u) start, binary $B, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ! -e "$D/sft_examples" ]; then
	$B ingest tasks --data "$D" --suite demo
	$B ingest ideas --data "$D" --source catalog
	$B rollout --data "$D" --split held-in --per_task 3 --env.max_steps 8
	$B dataset --data "$D"
	echo "$(date -u) data ready"
fi
for mode in fp32 bf16; do
	/usr/bin/time -f "sft $mode: %e s wall, %U s user, %S s system" \
		$B train sft --data "$D" --out "checkpoints/sft-$mode" --matmul "$mode" --max_steps "$STEPS" --epochs "${EPOCHS:-12}" --resume=false 2>&1 |
		grep -v '^\s*$' | grep -E "train sft:|^sft " || true
done
python3 "$(dirname "$0")/bf16-compare.py" "$D/checkpoints/sft-fp32/metrics.jsonl" "$D/checkpoints/sft-bf16/metrics.jsonl"
for mode in fp32 bf16; do
	echo "$(date -u) evaluate sft-$mode"
	$B evaluate --data "$D" --splits held-out,held-in --per_task 8 --env.max_steps 8 --policy_per_task 3 \
		--max_new_tokens 96 --methods sft --sft "checkpoints/sft-$mode" 2>&1 | sed -n '/^HELD-OUT/,$p'
done
echo "$(date -u) end, load $(cut -d' ' -f1-3 /proc/loadavg)"
