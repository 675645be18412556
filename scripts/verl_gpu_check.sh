#!/usr/bin/env bash
# verl_gpu_check.sh: two GRPO steps of verl's own trainer on mlerl's verl
# export, rewarded by `mlerl serve-env` through scripts/verl_reward.py, on
# a machine with one CUDA GPU and PyPI in reach. Not run by any make
# target; prepared for the step `make interop` cannot take on CPU:
# verl 0.9.1's trainer asks Ray for trainer.n_gpus_per_node GPUs
# ("Total available GPUs 0 is less than total desired GPUs 1") and
# generates with vllm, sglang or trtllm only (no Hugging Face rollout).
# Not yet run anywhere: the development machines have no GPU.
#
#   scripts/verl_gpu_check.sh [DATA]   # DATA: a data root `make interop` made (default ./data-interop)
#
# Environment: VERL_GPU_VENV (default .deps/interop-gpu: verl[vllm]
# pins transformers 5.9.0, which LLaMA-Factory 0.9.5 refuses, so it is a
# venv of its own), VERL_GPU_MODEL (default the tiny Qwen2 checkpoint the
# exports were counted with; a real one such as a local copy of
# Qwen2.5-0.5B-Instruct if vLLM refuses the tiny one's 8-wide heads; then
# rebuild the exports with `mlerl dataset --export_tokenizer` on it so the
# prompt lengths are its own).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:-./data-interop}"
VENV="${VERL_GPU_VENV:-.deps/interop-gpu}"
MODEL="${VERL_GPU_MODEL:-$PWD/policy/hf/testdata/ckpt/qwen2}"
BIN="${MLERL_BIN:-bin/mlerl}"
OUT="${OUT:-$PWD/.gpu-check/verl}"
mkdir -p "$OUT"

command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "verl_gpu_check: no CUDA GPU here (nvidia-smi)"; exit 0; }
if ! "$VENV/bin/python" -c 'import verl, vllm' 2>/dev/null; then
	py=$(pyenv which python3.11 2>/dev/null || command -v python3.11)
	"$py" -m venv "$VENV"
	"$VENV/bin/pip" install --quiet "verl[vllm]==0.9.1"
fi
"$VENV/bin/python" -c 'import importlib.metadata as m; print("verl_gpu_check:", ", ".join(f"{p} {m.version(p)}" for p in ("verl", "vllm", "torch", "transformers")))'

latest() { ls -d "$DATA/$1"/v* | sed 's/.*\/v//' | sort -n | tail -1; }
EXP="$DATA/exports/rl_states/v$(latest rl_states)"
# The longest prompt mlerl counted (stats.md: "max N" of each verl file).
MAXP=$(sed -n 's/^n [0-9]*, min [0-9]*, mean [0-9.]*, p50 [0-9]*, p90 [0-9]*, max \([0-9]*\)$/\1/p' "$DATA/rl_states/v$(latest rl_states)/stats.md" | sort -n | tail -1)

openssl rand -hex 32 >"$OUT/token"
"$BIN" serve-env --data "$DATA" --addr 127.0.0.1:18080 --token_file "$OUT/token" >"$OUT/serve-env.log" 2>&1 &
SERVE=$!
trap 'kill $SERVE 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -sf http://127.0.0.1:18080/healthz >/dev/null && break; sleep 1; done

t0=$(date +%s)
MLERL_ENV_URL=http://127.0.0.1:18080 MLERL_SERVE_TOKEN_FILE="$OUT/token" \
	"$VENV/bin/python" -m verl.trainer.main_ppo \
	algorithm.adv_estimator=grpo \
	data.train_files="$EXP/verl_train.parquet" data.val_files="$EXP/verl_val.parquet" \
	data.max_prompt_length="$MAXP" data.max_response_length=128 data.train_batch_size=4 \
	actor_rollout_ref.model.path="$MODEL" actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=2 \
	actor_rollout_ref.rollout.gpu_memory_utilization=0.3 actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
	actor_rollout_ref.actor.ppo_mini_batch_size=4 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
	actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \
	trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.logger=console trainer.total_training_steps=2 \
	trainer.val_before_train=false trainer.save_freq=-1 trainer.default_local_dir="$OUT/ckpt" \
	reward.custom_reward_function.path="$PWD/scripts/verl_reward.py" reward.num_workers=1 \
	2>&1 | tee "$OUT/train.log"
echo "verl_gpu_check: $(grep -c 'training/global_step' "$OUT/train.log") step lines in $(($(date +%s) - t0))s; serve-env answered $(grep -c '"path":"/v1/step"' "$OUT/serve-env.log") rewards (logs in $OUT)"
