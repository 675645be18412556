#!/usr/bin/env bash
# Run 16 (SCIENCE.md): the data root, then the five seeds two at a time,
# each seed's rows, reports and selection copied into OUT/seed-<S>/ as it
# ends. Rerunning resumes: the data stages skip what exists, the grid
# resumes its pending version, a seed already in OUT is not run again.
#   docs/run16/chain.sh BINARY [DIR]
# DIR, the folder you name (default $RUNS/run16, RUNS default data/ under
# the checkout), gets the data root DIR/root and the logs DIR/logs; OUT
# (default DIR) gets the seeds' copies. Run 16 as published ran with
# OUT=docs/run16, where its five seeds now are.
# Run 16's recipe is the default; for a smaller rehearsal: SEEDS (61 62
# 63 64 65), JOBS (seeds at a time, 2), PER_TASK (expert trajectories per
# held-in task, 10), EXPERIMENT_FLAGS (more flags of each seed's
# `mlerl experiment`, after the config's: --budget small ...). DRY_RUN=1
# prints every command with its paths resolved and runs none.
set -euo pipefail
BIN=${1:?usage: chain.sh BINARY [DIR]}
DOCS=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$DOCS/../.." && pwd)
DIR=${2:-${RUNS:-$REPO/data}/run16}
ROOT=$DIR/root
LOGS=$DIR/logs
OUT=${OUT:-$DIR}
SEEDS=${SEEDS:-61 62 63 64 65}
PER_TASK=${PER_TASK:-10}
DRY=${DRY_RUN:-0}
# The declared binary was built with the Makefile's GOEXPERIMENT=simd; a
# plain go build runs the portable kernels (same floats, tens of times
# slower), which is how the second restart first went wrong.
if ! go version -m "$BIN" | grep -q 'GOEXPERIMENT=simd'; then
	echo "run16: $BIN was built without GOEXPERIMENT=simd: rebuild it (git worktree add DIR f17f1de; cd DIR; GOEXPERIMENT=simd go build -o BINARY ./cmd/mlerl)" >&2
	exit 2
fi
echo "run16: binary $BIN, data root $ROOT, logs $LOGS, seeds into $OUT/seed-<S>"
[ "$DRY" = 1 ] || mkdir -p "$LOGS"
data() { # one data stage, skipped when its dataset exists
	local name=$1; shift
	if [ -e "$ROOT/$name" ]; then echo "run16: $name exists"; return; fi
	if [ "$DRY" = 1 ]; then echo "+ $BIN $* > $LOGS/data-$name.log"; return; fi
	echo "run16: $* ($(date -u +%H:%M:%S))"
	"$BIN" "$@" > "$LOGS/data-$name.log" 2>&1
}
data tasks ingest tasks --data "$ROOT"
data ideas ingest ideas --data "$ROOT" --source catalog
data steps rollout --data "$ROOT" --split held-in --per_task "$PER_TASK" --env.max_steps 8
data sft_examples dataset --data "$ROOT"

seed() {
	local s=$1 out="$OUT/seed-$1"
	[ -s "$out/rows.jsonl" ] && { echo "run16: seed $s is in"; return; }
	# --data: the config's data: is the default DIR's root (taken from the
	# config's folder); the flag points the grid at this run's.
	# shellcheck disable=SC2086 # EXPERIMENT_FLAGS is a list of flags
	local cmd=("$BIN" experiment --config "$DOCS/run16.yaml" --data "$ROOT" --name "run16-s$s" --seeds "$s" ${EXPERIMENT_FLAGS:-})
	if [ "$DRY" = 1 ]; then echo "+ ${cmd[*]} > $LOGS/seed-$s.log"; return; fi
	echo "run16: seed $s starts ($(date -u +%H:%M:%S))"
	"${cmd[@]}" > "$LOGS/seed-$s.log" 2>&1
	mkdir -p "$out"
	local rep=$ROOT/reports/experiment-run16-s$s
	cp "$rep"/*.md "$rep"/*.png "$out/" 2>/dev/null || true
	for c in "$rep"/cells/*/; do
		local n=$(basename "$c")
		cp "$c/report.md" "$out/cell-$n-report.md" 2>/dev/null || true
	done
	# The copies' links to what stayed in the report folder, made plain.
	python3 "$REPO/scripts/relink_report_copies.py" "$out"
	cp "$ROOT/checkpoints/run16-s$s-sft+ppo/selection.json" "$out/selection.json" 2>/dev/null || \
		find "$ROOT" -path "*run16-s$s*" -name selection.json -exec cp {} "$out/selection.json" \; -quit
	tail -n 40 "$LOGS/seed-$s.log" > "$out/grid-stdout.txt"
	# The grid's own version of the rows dataset (its log names it), not
	# the latest, which another seed may have committed since.
	local rows=$(sed -n 's/.*rows in \([^ ,]*\).*/\1/p' "$LOGS/seed-$s.log" | tail -1)
	"$BIN" head --json -n 100000 "$rows" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if r.get('grid') == 'run16-s$s':
        print(json.dumps(r))" > "$out/rows.jsonl"
	echo "run16: seed $s ends ($(date -u +%H:%M:%S)), $(wc -l < "$out/rows.jsonl") rows"
}
# JOBS seeds at a time (2 unless told): a seed starts whenever fewer run.
JOBS=${JOBS:-2}
for s in $SEEDS; do
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
	seed "$s" &
done
wait
echo "run16: seeds $SEEDS in ($(date -u +%H:%M:%S))"
