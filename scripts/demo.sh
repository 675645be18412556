#!/usr/bin/env bash
# demo.sh: the `make demo` driver (after `make setup build`). Runs the whole
# pipeline on the built-in suite with small budgets and ends with the
# held-out and held-in headline tables, each with its verdict (SFT+PPO
# against SFT), and one closing paragraph: what ran, what the trained
# policy did against SFT and the expert (one seed: a demo, not a result),
# the project's pre-declared result (read from docs/current-result.txt)
# and where the report is:
#
#   ingest tasks -> ingest ideas -> rollout (scripted expert, held-in tasks)
#   -> dataset -> train sft -> train ppo (checkpoint selected on the
#   held-in learning curve) -> evaluate (held-out and held-in tasks)
#
#   scripts/demo.sh [DATA]            # DATA: data root, default ./data
#
# Budgets (environment variables; the defaults aim at 15 minutes on 2 cores):
#   ROLLOUT_PER_TASK  expert trajectories per held-in task     (3)
#   MAX_STEPS         steps per trajectory, rollout and eval   (8)
#   SFT_STEPS         SFT updates of the demo model            (24)
#   SFT_BATCH_ROWS    packed rows of 512 tokens per SFT update (4)
#   PPO_UPDATES       PPO updates                              (20: where
#                     run 8's held-in curve had risen)
#   PPO_BATCH         samples per PPO update, 4 per state       (32)
#   OVERSAMPLE        dynamic sampling's cap: states drawn per update at
#                     most OVERSAMPLE x those wanted (2; the library's 4
#                     costs the demo's barely trained policy, two thirds
#                     of whose groups carry no signal, twice the time)
#   CURVE_EVERY       held-in learning-curve point every N updates (10),
#                     1 episode per held-in task: the checkpoint evaluated
#                     is the best point's (select.rule best-held-in),
#                     else the SFT policy
#   EVAL_PER_TASK     trajectories per task and method          (8)
#   POLICY_PER_TASK   of those, for the trained policies        (3: their
#                     generation is the slow part on 2 CPU cores)
#   MAX_NEW_TOKENS    longest policy answer, PPO and eval      (96)
# Every stage's log is kept in DATA/demo-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA="${1:-./data}"
BIN="${MLERL_BIN:-bin/mlerl}"
ROLLOUT_PER_TASK="${ROLLOUT_PER_TASK:-3}"
MAX_STEPS="${MAX_STEPS:-8}"
SFT_STEPS="${SFT_STEPS:-24}"
SFT_BATCH_ROWS="${SFT_BATCH_ROWS:-4}"
PPO_UPDATES="${PPO_UPDATES:-20}"
PPO_BATCH="${PPO_BATCH:-32}"
OVERSAMPLE="${OVERSAMPLE:-2}"
CURVE_EVERY="${CURVE_EVERY:-10}"
EVAL_PER_TASK="${EVAL_PER_TASK:-8}"
POLICY_PER_TASK="${POLICY_PER_TASK:-3}"
MAX_NEW_TOKENS="${MAX_NEW_TOKENS:-96}"
export GOEXPERIMENT="${GOEXPERIMENT:-simd}"
export MLERL_DEPS="${MLERL_DEPS:-$PWD/.deps}"

if [ ! -x "$BIN" ]; then
	echo "demo: $BIN not found; run \`make build\` (or \`make demo\`, which builds it)" >&2
	exit 1
fi
LOGS="$DATA/demo-logs"
mkdir -p "$LOGS"
if [ -e "$DATA/tasks" ]; then
	echo "demo: note: $DATA already holds datasets; this run adds new versions and retrains the checkpoints"
fi

echo "mlerl demo: data root $DATA, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at start"
echo "budgets: rollout $ROLLOUT_PER_TASK trajectories x $MAX_STEPS steps per held-in task; SFT $SFT_STEPS updates x $SFT_BATCH_ROWS rows;"
echo "         PPO $PPO_UPDATES updates x $PPO_BATCH samples (4 actions per state, 2-step returns, held-in curve every $CURVE_EVERY updates);"
echo "         evaluation $EVAL_PER_TASK trajectories x $MAX_STEPS steps per held-out and held-in task and method,"
echo "         but $POLICY_PER_TASK for the trained policies (SFT, SFT+PPO): their generation is the slow part on CPU"
echo

TIMES=()
START=$(date +%s)
# stage NAME CMD...: runs CMD with its output in LOGS/NAME.log, prints a
# banner and the elapsed time; on failure shows the log's tail.
stage() {
	local name="$1"
	shift
	local t0
	t0=$(date +%s)
	echo "=== [$((t0 - START))s] $name: $*"
	if ! "$@" >"$LOGS/$name.log" 2>&1; then
		echo "demo: stage $name failed; the end of $LOGS/$name.log:" >&2
		tail -n 30 "$LOGS/$name.log" >&2
		exit 1
	fi
	local dt=$(($(date +%s) - t0))
	TIMES+=("$(printf '%-14s %5ss' "$name" "$dt")")
	echo "    done in ${dt}s (load $(cut -d' ' -f1 /proc/loadavg))"
}

stage ingest-tasks "$BIN" ingest tasks --data "$DATA" --suite demo
stage ingest-ideas "$BIN" ingest ideas --data "$DATA" --source catalog
stage rollout "$BIN" rollout --data "$DATA" --split held-in --per_task "$ROLLOUT_PER_TASK" --env.max_steps "$MAX_STEPS"
stage dataset "$BIN" dataset --data "$DATA"
stage train-sft "$BIN" train sft --data "$DATA" --max_steps "$SFT_STEPS" --batch_rows "$SFT_BATCH_ROWS" --epochs 1 --resume=false
stage train-ppo "$BIN" train ppo --data "$DATA" --updates "$PPO_UPDATES" --batch_size "$PPO_BATCH" --gen_batch "$PPO_BATCH" \
	--max_new_tokens "$MAX_NEW_TOKENS" --workers 2 --checkpoint_every "$PPO_UPDATES" --resume=false \
	--oversample "$OVERSAMPLE" --curve.every "$CURVE_EVERY" --curve.splits held-in --curve.per_task 1 --curve.max_steps "$MAX_STEPS" \
	--select.rule best-held-in
stage evaluate "$BIN" evaluate --data "$DATA" --splits held-out,held-in --per_task "$EVAL_PER_TASK" --env.max_steps "$MAX_STEPS" \
	--policy_per_task "$POLICY_PER_TASK" --max_new_tokens "$MAX_NEW_TOKENS" --methods initial,random,expert,sft,sft+ppo

TOTAL=$(($(date +%s) - START))
echo
echo "=== stage times (total ${TOTAL}s, load average at the end $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%s\n' "${TIMES[@]}"
echo
echo "=== results on held-out and held-in tasks ($EVAL_PER_TASK trajectories x $MAX_STEPS steps per task and method, $POLICY_PER_TASK for SFT and SFT+PPO (TRAJ column);"
echo "    delta_r = relative gain of the final score over the initial script, mean over the split's tasks)"
# evaluate prints each split's table and its verdict (SFT+PPO against
# SFT), then the report's path, last on stdout; its log holds them after
# the progress lines. The path goes to the closing paragraph.
sed -n '/^HELD-OUT/,$p' "$LOGS/evaluate.log" | grep -v -e '^evaluate[: ]' -e '^report: '
if ! grep -q '^On held-out tasks' "$LOGS/evaluate.log"; then
	echo "(no SFT vs SFT+PPO verdict: one of the policies was not evaluated; see $LOGS/evaluate.log)"
fi
echo
# One closing paragraph, in the order a reader asks: what ran, what the
# trained policy did against SFT and the expert here (one seed: not a
# result), the project's pre-declared result, where the report is.
skipped=$(grep -c '"skipped":true' "$DATA/checkpoints/ppo/metrics.jsonl" 2>/dev/null || true)
selected=$(sed -n 's/.*"reason": "\(.*\)".*/\1/p' "$DATA/checkpoints/ppo/selection.json" 2>/dev/null | head -1)
selected_update=$(sed -n 's/.*"selected_update": \([0-9]*\).*/\1/p' "$DATA/checkpoints/ppo/selection.json" 2>/dev/null | head -1)
report=$(sed -n 's/^report: //p' "$LOGS/evaluate.log" | tail -1)
ntasks=$("$BIN" inspect --json "$DATA/tasks" 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["rows"])' 2>/dev/null || echo "the demo")
# Each split's delta_r of SFT+PPO, SFT and the expert, from the
# evaluation's manifest (its headline, as the tables above print it).
scores=$("$BIN" inspect --json "$DATA/eval_results" 2>/dev/null | python3 -c '
import json, sys
h = {(x["split"], x["method"]): x.get("delta_r") for x in json.load(sys.stdin).get("extra", {}).get("headline", [])}
pct = lambda v: "n/a" if v is None else "%+.2f%%" % (100 * v)
parts = ["%s on %s tasks (SFT %s, the scripted expert %s)" % (pct(h.get((s, "sft+ppo"))), s, pct(h.get((s, "sft"))), pct(h.get((s, "expert"))))
         for s in ("held-out", "held-in") if (s, "sft+ppo") in h]
print(" and ".join(parts))' 2>/dev/null || true)
if [ -s docs/current-result.txt ]; then
	result="The project's results are its latest pre-declared multi-seed runs (SCIENCE.md): $(tr '\n' ' ' < docs/current-result.txt | sed 's/ *$//')"
else
	result="The project's results are its latest pre-declared multi-seed runs: see SCIENCE.md (docs/current-result.txt, its one-line summary, is missing)."
fi
{
	printf 'In short: the demo ran every stage once on %s tasks of the built-in demo suite in %ss on %s cores: the scripted expert'"'"'s %s trajectories per held-in task, SFT of %s updates, PPO of %s updates (%s skipped for want of any group with a signal; the checkpoint evaluated as SFT+PPO was chosen on the held-in learning curve: %s), then %s trajectories per task and method (%s for SFT and SFT+PPO). ' \
		"$ntasks" "$TOTAL" "$(nproc)" "$ROLLOUT_PER_TASK" "$SFT_STEPS" "$PPO_UPDATES" "${skipped:-0}" "${selected:-no selection recorded}" "$EVAL_PER_TASK" "$POLICY_PER_TASK"
	if [ -n "$scores" ] && [ "$selected_update" = 0 ]; then
		printf 'The policy evaluated as SFT+PPO, the SFT weights here (PPO'"'"'s curve kept them), reached delta_r %s. ' "$scores"
	elif [ -n "$scores" ]; then
		printf 'The trained policy (SFT+PPO, update %s) reached delta_r %s. ' "$selected_update" "$scores"
	else
		printf 'The trained policy'"'"'s delta_r is in the tables above (the evaluation'"'"'s manifest could not be read). '
	fi
	printf 'That is one seed at a budget of minutes: it shows the pipeline working end to end, not whether RL helps. %s ' "$result"
	printf 'This run'"'"'s report, with every task, plot and the transcripts: %s.\n' "${report:-$DATA/reports (evaluate printed no path)}"
} | fold -s -w "${DEMO_WIDTH:-100}"
