#!/bin/bash
# Issue 33: the whole seed 41 of run 13's recipe with the timeout replay on
# (--env.exec_cache_timeouts in train ppo and evaluate), binary $1, idle.
set -e
cd /work/data/run13
export GOEXPERIMENT=simd MLERL_DEPS=/work/main/.deps
B=$1; N=$2
lscpu | grep -E "Model name|^Flags" | cut -c1-200
echo "$(date -u) start $B, load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -v $B experiment --config run13-replay.yaml --name $N --out $N --seeds 41 > /work/data/issue33/$N.log 2>&1
echo "$(date -u) end, load $(cut -d' ' -f1-3 /proc/loadavg)"
