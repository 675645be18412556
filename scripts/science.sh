#!/usr/bin/env bash
# science.sh: the `make science` driver (after `make setup build`). Makes
# the expert data when the data root has none (ingest, rollout, dataset),
# then runs the experiment grid: every arm (baselines, SFT, SFT + step-wise
# PPO and its ablations) with every seed, trained and evaluated by the
# stages, into the experiments dataset and a report with 95% intervals.
#
#   scripts/science.sh [DATA]        # DATA: data root, default ./data-science
#
# Environment: BUDGET (small: minutes; full: the run SCIENCE.md reports),
# SEEDS (comma list, default 1,2,3), ROLLOUT_PER_TASK (expert trajectories
# per held-in task, default 40), MAX_STEPS (steps per expert trajectory, 8),
# XP_FLAGS (more flags of `mlerl experiment`). A rerun resumes: finished
# cells are kept, and the stages resume their own checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA="${1:-./data-science}"
BIN="${MLERL_BIN:-bin/mlerl}"
BUDGET="${BUDGET:-small}"
SEEDS="${SEEDS:-1,2,3}"
ROLLOUT_PER_TASK="${ROLLOUT_PER_TASK:-40}"
MAX_STEPS="${MAX_STEPS:-8}"
export GOEXPERIMENT="${GOEXPERIMENT:-simd}"
export MLERL_DEPS="${MLERL_DEPS:-$PWD/.deps}"

echo "mlerl science: data root $DATA, budget $BUDGET, seeds $SEEDS, $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ! -e "$DATA/rl_states" ]; then
	echo "science: no expert data in $DATA yet: ingest, rollout ($ROLLOUT_PER_TASK x $MAX_STEPS steps per held-in task), dataset"
	"$BIN" ingest tasks --data "$DATA"
	"$BIN" ingest ideas --data "$DATA" --source catalog
	"$BIN" rollout --data "$DATA" --split held-in --per_task "$ROLLOUT_PER_TASK" --env.max_steps "$MAX_STEPS"
	"$BIN" dataset --data "$DATA"
fi
# shellcheck disable=SC2086 # XP_FLAGS is a list of flags
"$BIN" experiment --data "$DATA" --budget "$BUDGET" --seeds "$SEEDS" ${XP_FLAGS:-}
