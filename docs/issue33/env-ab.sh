#!/bin/bash
# Issue 33, a fourth session: the environment cuts (in-process suite
# grading, episodes across groups) measured on PPO alone. Ten updates of
# train ppo from the third Zen 5 seed's SFT checkpoint (seed 41, run 13's
# PPO flags, no learning curve), old binary ($1) and new binary ($2) in
# the order old, new, new, old, alone on the machine.
#   docs/issue33/env-ab.sh OLD NEW [NAME]
# (binaries $W/mlerl-OLD and -NEW; NAME, default envab, prefixes the
# runs' checkpoints and logs: a fifth session's gen-ab used genab.)
set -euo pipefail
N=${3:-envab}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$REPO/data} # the folder of the runs' data roots and binaries
W=$RUNS/run13z5
export GOEXPERIMENT=simd MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
cd $W
lscpu | grep -E "Model name|^Flags" | cut -c1-200
run() { # binary tag
  rm -rf root/checkpoints/$N-$2
  echo "$(date -u +%T) start $2 ($1), load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "$2 wall %e s, user %U s, sys %S s" $1 train ppo --data $W/root --seed 41 \
    --sft checkpoints/xp-zen5-after3/s41/sft --out checkpoints/$N-$2 --updates=10 --batch_size=32 \
    --gen_batch=32 --minibatches=2 --workers=2 --episode_steps=4 --checkpoint_every=20 --curve.max_steps=8 \
    --env.exec_cache_timeouts --own_states.mix=0.25 --curve.every=0 > $N-$2.log 2>&1
  tail -1 $N-$2.log
}
run $W/mlerl-$1 old1
run $W/mlerl-$2 new1
run $W/mlerl-$2 new2
run $W/mlerl-$1 old2
for t in old1 new1 new2 old2; do
  python3 - $W/root/checkpoints/$N-$t/metrics.jsonl $t <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if r.get("stage") == "ppo"]
s = lambda k: sum(r.get(k, 0) for r in rows)
print("%s updates %d: update %.1f s, generate %.1f, execute %.1f, learn %.1f, busy %.1f, script %.1f, runs %d, hits %d" % (
    sys.argv[2], len(rows), s("time/update_s"), s("time/generate_s"), s("time/execute_s"), s("time/learn_s"),
    s("time/execute_busy_s"), s("time/execute_script_s"), s("env/exec_cache_runs"), s("env/exec_cache_hits")))
PY
done
