#!/bin/bash
# Issue 33, a sixth session: episodes that act again once their own step
# is back (playSteps) against the lockstep schedule, one binary
# ($RUNS/run13z5/mlerl-REV for $1 = REV), the same samples by construction. Ten
# updates of train ppo from the third Zen 5 seed's SFT checkpoint (seed
# 41, run 13's PPO flags, no learning curve, as env-ab.sh), in the order
# lockstep, free, free, lockstep, alone on the machine.
#   docs/issue33/overlap-ab.sh REV [NAME]
set -euo pipefail
N=${2:-overlap}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
W=$RUNS/run13z5
B=$W/mlerl-$1
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
cd $W
lscpu | grep -E "Model name|^Flags" | cut -c1-200
run() { # tag flags...
  local t=$1; shift
  rm -rf root/checkpoints/$N-$t
  echo "$(date -u +%T) start $t ($B $*), load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "$t wall %e s, user %U s, sys %S s" $B train ppo --data $W/root --seed 41 \
    --sft checkpoints/xp-zen5-after3/s41/sft --out checkpoints/$N-$t --updates=10 --batch_size=32 \
    --gen_batch=32 --minibatches=2 --workers=2 --episode_steps=4 --checkpoint_every=20 --curve.max_steps=8 \
    --env.exec_cache_timeouts --own_states.mix=0.25 --curve.every=0 "$@" > $N-$t.log 2>&1
  tail -1 $N-$t.log
}
run lock1 --lockstep
run free1
run free2
run lock2 --lockstep
for t in lock1 free1 free2 lock2; do
  python3 - $W/root/checkpoints/$N-$t/metrics.jsonl $t $W/root/checkpoints/$N-lock1/metrics.jsonl <<'PY'
import json, sys
load = lambda p: [r for r in (json.loads(l) for l in open(p)) if r.get("stage") == "ppo"]
rows, ref = load(sys.argv[1]), load(sys.argv[3])
s = lambda k: sum(r.get(k, 0) for r in rows)
same = 0
for a, b in zip(rows, ref):
    if a.get("samples/action") != b.get("samples/action") or a.get("samples/reward") != b.get("samples/reward"):
        break
    same += 1
print("%s updates %d: update %.1f s, generate %.1f, execute %.1f, learn %.1f, busy %.1f, script %.1f, runs %d, hits %d; first %d updates' samples as lock1's" % (
    sys.argv[2], len(rows), s("time/update_s"), s("time/generate_s"), s("time/execute_s"), s("time/learn_s"),
    s("time/execute_busy_s"), s("time/execute_script_s"), s("env/exec_cache_runs"), s("env/exec_cache_hits"), same))
PY
done
