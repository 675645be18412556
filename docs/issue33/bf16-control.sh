#!/bin/bash
# Issue 33, declared before it ran: the float32 noise floor of the bf16
# check. The same SFT as bf16-check.sh's (same data, seed, steps), float32
# products but the AVX2 kernels (MLERL_NATIVE_KERNEL=avx2: the same math
# summed in another order), compared with the AVX-512 float32 run by the
# same windows: how far two float32 runs drift apart on this recipe.
set -euo pipefail
D=$1
B=${2:-bin/mlerl}
STEPS=${STEPS:-300}
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$PWD/.deps}
echo "$(date -u) start, load $(cut -d' ' -f1-3 /proc/loadavg)"
MLERL_NATIVE_KERNEL=avx2 /usr/bin/time -f "sft fp32-avx2: %e s wall, %U s user, %S s system" \
	$B train sft --data "$D" --out checkpoints/sft-fp32-avx2 --matmul fp32 --max_steps "$STEPS" --epochs "${EPOCHS:-12}" --resume=false 2>&1 |
	grep -E "train sft:|^sft " || true
echo "# float32 AVX-512 (A) against float32 AVX2 (B):"
python3 "$(dirname "$0")/bf16-compare.py" "$D/checkpoints/sft-fp32/metrics.jsonl" "$D/checkpoints/sft-fp32-avx2/metrics.jsonl"
echo "# float32 AVX2 (A) against bf16 (B):"
python3 "$(dirname "$0")/bf16-compare.py" "$D/checkpoints/sft-fp32-avx2/metrics.jsonl" "$D/checkpoints/sft-bf16/metrics.jsonl"
echo "$(date -u) end"
