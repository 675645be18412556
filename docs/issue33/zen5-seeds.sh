#!/bin/bash
# Issue 33 on AMD EPYC Zen 5 (avx512_bf16): run 13's seed 41 before and
# after, one after the other, alone on the machine, in the same session.
# before: binary cc699e0 (run 13's), run13.yaml; after: binary $AFTER
# (this session's, bf16 SFT by default here) with the third seed's
# command, run13-replay.yaml (--env.exec_cache_timeouts in train ppo and
# evaluate). The data root is built first with cc699e0, as run 13's was.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
W=$RUNS/run13z5
BEFORE=$W/mlerl-cc699e0
AFTER=$1
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
cd $W
lscpu | grep -E "Model name|^Flags" | cut -c1-200
if [ ! -e root/rl_states ]; then
	echo "$(date -u) data root, $BEFORE"
	$BEFORE ingest tasks --data root > data.log 2>&1
	$BEFORE ingest ideas --data root --source catalog >> data.log 2>&1
	$BEFORE rollout --data root --split held-in --per_task 10 --env.max_steps 8 >> data.log 2>&1
	$BEFORE dataset --data root >> data.log 2>&1
	echo "$(date -u) data root done"
fi
[ "${DATA_ONLY:-0}" = 1 ] && exit 0
for side in before after; do
	B=$BEFORE; C=$REPO/docs/run13/run13.yaml
	[ $side = after ] && B=$AFTER && C=$REPO/docs/issue33/run13-replay.yaml
	echo "$(date -u) start $side: $B $C, load $(cut -d' ' -f1-3 /proc/loadavg)"
	/usr/bin/time -v $B experiment --config "$C" --data "$W/root" --name zen5-$side --out zen5-$side --seeds 41 > $side.log 2> $side.time || { echo "$side failed"; tail -20 $side.log; exit 1; }
	echo "$(date -u) end $side, load $(cut -d' ' -f1-3 /proc/loadavg)"
	grep -E "Elapsed|User time|System time" $side.time
done
