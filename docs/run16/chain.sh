#!/usr/bin/env bash
# Run 16 (SCIENCE.md): the data root, then the five seeds two at a time,
# each seed's rows, reports and selection copied into docs/run16/seed-<S>/
# as it ends. Rerunning resumes: the data stages skip what exists, the
# grid resumes its pending version, a committed seed is not run again.
#   docs/run16/chain.sh /work/data/run16/mlerl-<rev>
set -euo pipefail
BIN=${1:?usage: chain.sh BINARY}
# The declared binary was built with the Makefile's GOEXPERIMENT=simd; a
# plain go build runs the portable kernels (same floats, tens of times
# slower), which is how the second restart first went wrong.
if ! go version -m "$BIN" | grep -q 'GOEXPERIMENT=simd'; then
	echo "run16: $BIN was built without GOEXPERIMENT=simd: rebuild it (git worktree add DIR f17f1de; cd DIR; GOEXPERIMENT=simd go build -o BINARY ./cmd/mlerl)" >&2
	exit 2
fi
ROOT=/work/data/run16/root
DOCS=$(cd "$(dirname "$0")" && pwd)
LOGS=/work/data/run16/logs
mkdir -p "$LOGS"
data() { # one data stage, skipped when its dataset exists
	local name=$1; shift
	if [ -e "$ROOT/$name" ]; then echo "run16: $name exists"; return; fi
	echo "run16: $* ($(date -u +%H:%M:%S))"
	"$BIN" "$@" > "$LOGS/data-$name.log" 2>&1
}
data tasks ingest tasks --data "$ROOT"
data ideas ingest ideas --data "$ROOT" --source catalog
data steps rollout --data "$ROOT" --split held-in --per_task 10 --env.max_steps 8
data sft_examples dataset --data "$ROOT"

seed() {
	local s=$1 out="$DOCS/seed-$1"
	[ -s "$out/rows.jsonl" ] && { echo "run16: seed $s is in"; return; }
	echo "run16: seed $s starts ($(date -u +%H:%M:%S))"
	"$BIN" experiment --config "$DOCS/run16.yaml" --name "run16-s$s" --seeds "$s" > "$LOGS/seed-$s.log" 2>&1
	mkdir -p "$out"
	local rep=$ROOT/reports/experiment-run16-s$s
	cp "$rep"/*.md "$rep"/*.png "$out/" 2>/dev/null || true
	for c in "$rep"/cells/*/; do
		local n=$(basename "$c")
		cp "$c/report.md" "$out/cell-$n-report.md" 2>/dev/null || true
	done
	cp "/work/data/run16/root/checkpoints/run16-s$s-sft+ppo/selection.json" "$out/selection.json" 2>/dev/null || \
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
for s in 61 62 63 64 65; do
	while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
	seed "$s" &
done
wait
echo "run16: all five seeds in ($(date -u +%H:%M:%S))"
