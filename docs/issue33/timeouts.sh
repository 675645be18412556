#!/bin/bash
# Issue 33: the timeout replay on the after-seed's SFT+PPO policy, income-bracket only (both splits' filter), on then off.
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
cd "$RUNS/run13"
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
B=${1:-$RUNS/issue33/mlerl-18f5e3d}
for on in true false; do
  echo "$(date -u) exec_cache_timeouts=$on"
  /usr/bin/time -f "wall %e s, cpu %U+%S s" $B evaluate --data "$RUNS/run13/root" --seed 41 --out issue33-timeouts-$on --report "$RUNS/issue33/timeouts-$on" --env.max_steps=8 --splits=held-out,held-in --per_task=2 --policy_per_task=2 --only=income-bracket --methods sft+ppo --sft checkpoints/xp-issue33-after/s41/sft --ppo checkpoints/xp-issue33-after/s41/sft+ppo --env.exec_cache_timeouts=$on 2>&1 | grep -v "^#" | tail -6
done
