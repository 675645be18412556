#!/usr/bin/env bash
# gpu_check.sh: the `make gpu-check` driver: does the GoMLX XLA engine run
# on this machine's CUDA GPU, agree with the native engine there, and how
# fast does it train?
#
# On a machine without a CUDA GPU (no nvidia-smi, or it lists no device) it
# prints one line saying so and exits 0. With one, it
#
#   1. finds JAX's PJRT CUDA plugin (see find_plugin below; GoMLX loads it
#      at run time, policy/engine_xla.go) and says which it uses;
#   2. builds bin/mlerl and the policy package's test binary;
#   3. runs the GoMLX-vs-native agreement tests (logits, loss, every
#      gradient, a 12-step training curve, checkpoints across engines)
#      with GOMLX_BACKEND=<plugin>,tf32=false (full float32 matmuls: TF32
#      would miss the tests' 1e-4 tolerance), after checking that the
#      backend really is the CUDA one; then the same for the Hugging Face
#      architectures (policy/engine_gomlx_hf_test.go: tiny Llama, Qwen2,
#      Qwen3 shapes, full and LoRA, decoder, LoRA training, dropout, a bf16
#      base, optimiser state; and transformers' / PEFT's references; and
#      the tiny checkpoints as policies, engine gomlx against native);
#   3b. times the Qwen2.5-0.5B shape (random weights) on the GPU
#      (TestGPUHFShape): LoRA SFT steps/s (rank 16 on every target, 4 rows
#      of the demo recipe's 640 tokens) and generation steps/s (8 rows from
#      2 shared prompts), with a float32 and a bfloat16 base;
#   4. makes small demo data with the scripted expert (two held-in tasks,
#      2 trajectories each; or uses GPU_CHECK_DATA, a data root that holds
#      sft_examples and rl_states, copied first);
#   5. runs a 20-update SFT and a 4-update PPO of the demo model on the
#      native CPU engine and on the GoMLX engine with GOMLX_BACKEND=<plugin>
#      (TF32 on, GoMLX's default on CUDA), and prints SFT tokens/s and PPO
#      samples/s side by side (medians over the updates after the first,
#      which includes XLA's compilation).
#
# It aims at under 10 minutes on a GPU machine whose Go build cache is warm
# (a cold `go build` of the binary alone takes minutes; the 0.5B step's XLA
# compilations take a minute or two); each step has a time limit and the
# step times are printed. Needs: Go (the build), the
# Qwen tokenizer from `make setup` (the dataset stage) and, to make demo
# data and for PPO's environment reward, Debian's python3-sklearn (without
# it, give GPU_CHECK_DATA, and PPO uses --reward format).
#
#   scripts/gpu_check.sh                 # or: make gpu-check
#   GPU_CHECK_DATA=./data-demo scripts/gpu_check.sh
#
# Environment: GPU_CHECK_DATA (above), GPU_CHECK_BIN and
# GPU_CHECK_POLICY_TEST (a prebuilt bin/mlerl and `go test -c ./policy`
# binary, built with GOEXPERIMENT=simd on another machine: the check then
# needs no Go toolchain and skips its build steps), GPU_CHECK_WORK (working folder,
# default a fresh temporary one, kept without its checkpoints),
# PJRT_PLUGIN_LIBRARY_PATH,
# GOMLX_BACKEND and GPU_CHECK_PYTHON (see find_plugin),
# GPU_CHECK_PPO_UPDATES (default 4; more show the GPU after its graphs are
# compiled), MLERL_XLA_AUTO_INSTALL=1 (let go-xla download the plugin, which needs
# the internet), GPU_CHECK_DRY_RUN=1 (stop after saying which plugin and
# library path it would use), GPU_CHECK_HF=0 (skip the Hugging Face steps),
# GPU_CHECK_HF_ONLY=1 (only the build, the agreement tests and the
# Hugging Face steps: no demo data, SFT or PPO runs), GPU_CHECK_HF_BASES
# (the 0.5B step's base storages, default fp32,bf16), GPU_CHECK_HF_STEPS
# (its timed SFT steps, default 5).
set -euo pipefail
cd "$(dirname "$0")/.."

# --- 0. A CUDA GPU? ---------------------------------------------------------
gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
	gpu="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -n 1 || true)"
	if [ -z "$gpu" ]; then
		echo "gpu-check: no CUDA GPU on this machine (nvidia-smi lists no device); nothing to check"
		exit 0
	fi
else
	echo "gpu-check: no CUDA GPU on this machine (no nvidia-smi); nothing to check"
	exit 0
fi

export GOEXPERIMENT="${GOEXPERIMENT:-simd}"
export MLERL_DEPS="${MLERL_DEPS:-$PWD/.deps}"
GO="${GO:-go}"
BIN="${GPU_CHECK_BIN:-$PWD/bin/mlerl}"
START=$(date +%s)
echo "gpu-check: $gpu ($(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1) driver), $(nproc) CPU cores"

fail() {
	echo "gpu-check: $*" >&2
	exit 1
}
HF="${GPU_CHECK_HF:-1}"
HF_ONLY="${GPU_CHECK_HF_ONLY:-0}"
case "$HF$HF_ONLY" in 00 | 10 | 11) ;; *) fail "GPU_CHECK_HF=$HF, GPU_CHECK_HF_ONLY=$HF_ONLY: want GPU_CHECK_HF 0 or 1 and GPU_CHECK_HF_ONLY 0 or 1 (not with GPU_CHECK_HF=0)" ;; esac
PPO_UPDATES="${GPU_CHECK_PPO_UPDATES:-4}"
case "$PPO_UPDATES" in '' | *[!0-9]* | 0 | 1) fail "GPU_CHECK_PPO_UPDATES=$PPO_UPDATES: want a whole number of updates, 2 or more" ;; esac

# --- 1. The PJRT CUDA plugin ------------------------------------------------
# GoMLX's XLA backend (github.com/gomlx/go-xla) loads a PJRT plugin by name
# ("xla:cuda") from PJRT_PLUGIN_LIBRARY_PATH, or else from ~/.local/lib/go-xla,
# /usr/local/lib/go-xla (each with its nvidia/ subfolder, where go-xla's own
# installer puts it), ~/.local/lib/gomlx/pjrt, /usr/local/lib/gomlx/pjrt and
# the library path, matching pjrt_c_api_<name>_plugin.so or
# pjrt[-_]plugin[-_]<name>.so; or by absolute path ("xla:/path/to/plugin.so").
# JAX's wheels (jax-cuda12-pjrt, jax-cuda13-pjrt) install
# site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so, a name go-xla
# does not search for: it is used by absolute path, with the CUDA libraries
# of the nvidia-* wheels beside it (site-packages/nvidia/*/lib) put on the
# library path and their ptxas/libdevice (nvidia/cuda_nvcc) given to XLA.
# It sets BACKEND (the GOMLX_BACKEND value) or stops with what to install.
find_plugin() {
	if [ -n "${GOMLX_BACKEND:-}" ]; then
		case "$GOMLX_BACKEND" in
		xla:*cuda* | xla:*CUDA*) BACKEND="${GOMLX_BACKEND%%,*}"; return ;;
		*) fail "GOMLX_BACKEND=$GOMLX_BACKEND is not a CUDA XLA backend (want xla:cuda or xla:/path/to/a/cuda/plugin.so); unset it to let this script find the plugin" ;;
		esac
	fi
	local dirs=()
	if [ -n "${PJRT_PLUGIN_LIBRARY_PATH:-}" ]; then
		IFS=: read -r -a dirs <<<"$PJRT_PLUGIN_LIBRARY_PATH"
	else
		dirs=("$HOME/.local/lib/go-xla" "$HOME/.local/lib/go-xla/nvidia" /usr/local/lib/go-xla /usr/local/lib/go-xla/nvidia
			"$HOME/.local/lib/gomlx/pjrt" /usr/local/lib/gomlx/pjrt)
		local ld
		IFS=: read -r -a ld <<<"${LD_LIBRARY_PATH:-}"
		dirs+=("${ld[@]}")
	fi
	local d f
	for d in "${dirs[@]}"; do
		[ -n "$d" ] || continue
		for f in "$d"/pjrt_c_api_cuda*_plugin.so "$d"/pjrt[-_]plugin[-_]cuda*.so; do
			if [ -f "$f" ]; then
				BACKEND="xla:cuda"
				return
			fi
		done
	done
	local py
	for py in ${GPU_CHECK_PYTHON:-python3 /usr/bin/python3}; do
		command -v "$py" >/dev/null 2>&1 || continue
		f="$("$py" - <<-'EOF' 2>/dev/null || true
			import glob, os, site, sys
			roots = list(sys.path)
			try:
			    roots += site.getsitepackages() + [site.getusersitepackages()]
			except AttributeError:
			    pass
			for r in roots:
			    for p in sorted(glob.glob(os.path.join(r, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so")), reverse=True):
			        print(os.path.realpath(p))
			        sys.exit(0)
		EOF
		)"
		if [ -n "$f" ]; then
			local sp nv libs
			sp="$(dirname "$(dirname "$(dirname "$f")")")" # site-packages
			nv="$sp/nvidia"
			if [ -d "$nv" ]; then
				libs="$(find "$nv" -mindepth 2 -maxdepth 2 -type d -name lib | sort | tr '\n' ':')"
				export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:-}"
				if [ -d "$nv/cuda_nvcc" ] && [[ "${XLA_FLAGS:-}" != *xla_gpu_cuda_data_dir* ]]; then
					export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_cuda_data_dir=$nv/cuda_nvcc"
				fi
				export GOPJRT_CUDA_CHECKS=0 # its nvidia/ check looks beside go-xla's layout, not JAX's
			fi
			BACKEND="xla:$f"
			return
		fi
	done
	if [ "${MLERL_XLA_AUTO_INSTALL:-}" = 1 ]; then
		BACKEND="xla:cuda" # go-xla downloads the plugin on first use
		return
	fi
	fail "found $gpu but no PJRT CUDA plugin: install JAX's (pip install -U \"jax[cuda12]\", which brings jax-cuda12-pjrt and the CUDA libraries), or put pjrt_c_api_cuda_plugin.so in ~/.local/lib/go-xla or a folder named by PJRT_PLUGIN_LIBRARY_PATH, or set GOMLX_BACKEND=xla:/path/to/the/plugin.so, or MLERL_XLA_AUTO_INSTALL=1 to let go-xla download it"
}
BACKEND=""
find_plugin # sets BACKEND, and the library path for JAX's layout
echo "gpu-check: GoMLX backend $BACKEND"
if [ "${GPU_CHECK_DRY_RUN:-}" = 1 ]; then
	echo "gpu-check: dry run: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} XLA_FLAGS=${XLA_FLAGS:-}"
	exit 0
fi

if [ -z "${GPU_CHECK_BIN:-}" ] || [ -z "${GPU_CHECK_POLICY_TEST:-}" ]; then
	command -v "$GO" >/dev/null 2>&1 || fail "no Go toolchain ($GO) on the PATH: the check builds the binary; install Go 1.26, or give GPU_CHECK_BIN and GPU_CHECK_POLICY_TEST built elsewhere"
fi
WORK="${GPU_CHECK_WORK:-$(mktemp -d /tmp/mlerl-gpu-check-XXXXXX)}"
mkdir -p "$WORK/logs"
TIMES=()
# step NAME LIMIT CMD...: runs CMD (time limit LIMIT seconds) with its output
# in WORK/logs/NAME.log; on failure prints the log's tail and stops.
step() {
	local name="$1" limit="$2"
	shift 2
	local t0=$(date +%s)
	echo "=== [$((t0 - START))s] $name"
	if ! timeout "$limit" "$@" >"$WORK/logs/$name.log" 2>&1; then
		echo "gpu-check: step $name failed or ran past ${limit}s; the end of $WORK/logs/$name.log:" >&2
		tail -n 30 "$WORK/logs/$name.log" >&2
		exit 1
	fi
	TIMES+=("$(printf '%-12s %4ss' "$name" "$(($(date +%s) - t0))")")
}

# --- 2. Build ----------------------------------------------------------------
if [ -n "${GPU_CHECK_BIN:-}" ]; then
	[ -x "$BIN" ] || fail "GPU_CHECK_BIN=$BIN is not an executable file"
elif [ "$HF_ONLY" != 1 ]; then
	step build 600 "${MAKE:-make}" build
fi
if [ -n "${GPU_CHECK_POLICY_TEST:-}" ]; then
	[ -x "$GPU_CHECK_POLICY_TEST" ] || fail "GPU_CHECK_POLICY_TEST=$GPU_CHECK_POLICY_TEST is not an executable file"
	cp "$GPU_CHECK_POLICY_TEST" "$WORK/policy.test"
else
	step build-test 600 "$GO" test -c -o "$WORK/policy.test" ./policy
fi

# --- 3. Agreement on the GPU --------------------------------------------------
step agreement 180 env -C "$PWD/policy" GOMLX_BACKEND="$BACKEND,tf32=false" MLERL_GPU_CHECK=1 \
	"$WORK/policy.test" -test.count=1 -test.v \
	-test.run '^(TestGPUBackend|TestEnginesAgree|TestTrainingCurvesAgree|TestCheckpointAcrossEngines)$'
for t in TestGPUBackend TestEnginesAgree TestTrainingCurvesAgree; do
	grep -q -- "--- PASS: $t " "$WORK/logs/agreement.log" || fail "$t did not pass on the GPU (see $WORK/logs/agreement.log)"
done
grep -h -m 1 'GPU backend:' "$WORK/logs/agreement.log" | sed 's/.*GPU backend: /gpu-check: the agreement tests ran on /' || true

# --- 3b. Hugging Face architectures: agreement, then the 0.5B shape's speed ----
if [ "$HF" = 1 ]; then
	HF_TESTS=(TestGomlxArchAgreesWithNative TestGomlxArchDecoder TestGomlxArchLoRATrains TestGomlxArchDropout
		TestGomlxArchBF16Base TestGomlxArchDetachValue TestGomlxOptimizerStateResumes TestGomlxArchHFReference TestGomlxArchHFReferenceLoRA
		TestHFPolicyGomlx)
	step hf-agreement 300 env -C "$PWD/policy" GOMLX_BACKEND="$BACKEND,tf32=false" \
		"$WORK/policy.test" -test.count=1 -test.v -test.run "^($(IFS='|'; echo "${HF_TESTS[*]}"))\$"
	for t in "${HF_TESTS[@]}"; do
		grep -q -- "--- PASS: $t " "$WORK/logs/hf-agreement.log" || fail "$t did not pass on the GPU (see $WORK/logs/hf-agreement.log)"
	done
	step hf-0.5b 600 env -C "$PWD/policy" GOMLX_BACKEND="$BACKEND" MLERL_GPU_CHECK=1 MLERL_GPU_HF_SHAPE=qwen2.5-0.5b \
		MLERL_GPU_HF_BASES="${GPU_CHECK_HF_BASES:-fp32,bf16}" MLERL_GPU_HF_STEPS="${GPU_CHECK_HF_STEPS:-5}" \
		"$WORK/policy.test" -test.count=1 -test.v -test.run '^TestGPUHFShape$'
	grep -q -- "--- PASS: TestGPUHFShape " "$WORK/logs/hf-0.5b.log" || fail "TestGPUHFShape did not pass (see $WORK/logs/hf-0.5b.log)"
fi
if [ "$HF_ONLY" = 1 ]; then
	echo
	echo "=== $gpu: Qwen2.5-0.5B shape, GoMLX $BACKEND (TF32 on)"
	grep -h '^gpu-hf:' "$WORK/logs/hf-0.5b.log" | sed 's/^gpu-hf: //'
	echo
	echo "=== step times (total $(($(date +%s) - START))s)"
	printf '%s\n' "${TIMES[@]}"
	echo "gpu-check: passed (Hugging Face steps only); logs in $WORK/logs"
	exit 0
fi

# --- 4. Demo data --------------------------------------------------------------
D="$WORK/data"
REWARD=env
if ! /usr/bin/python3 -c 'import numpy, pandas, sklearn' 2>/dev/null && ! python3 -c 'import numpy, pandas, sklearn' 2>/dev/null; then
	REWARD=format # no task interpreter: PPO scores only the format
fi
if [ -n "${GPU_CHECK_DATA:-}" ]; then
	[ -d "$GPU_CHECK_DATA/sft_examples" ] && [ -d "$GPU_CHECK_DATA/rl_states" ] ||
		fail "GPU_CHECK_DATA=$GPU_CHECK_DATA holds no sft_examples and rl_states (make them with make ingest rollout dataset)"
	cp -r "$GPU_CHECK_DATA" "$D"
	rm -rf "$D/checkpoints"
else
	[ "$REWARD" = env ] || fail "no Python with numpy, pandas and scikit-learn to make demo data with (apt-get install python3-sklearn python3-pandas), and no GPU_CHECK_DATA"
	step ingest 120 "$BIN" ingest tasks --data "$D" --only wine-cultivar,breast-cancer-diagnosis
	step ideas 60 "$BIN" ingest ideas --data "$D" --k 4
	step rollout 180 "$BIN" rollout --data "$D" --per_task 2 --env.max_steps 6
	step dataset 120 "$BIN" dataset --data "$D" --exports=false
fi

# --- 5. SFT and PPO, CPU then GPU ------------------------------------------------
SFT=(train sft --data "$D" --max_steps 20 --epochs 20 --batch_rows 4 --resume=false)
PPO_LIMIT=$((120 + 45 * PPO_UPDATES)) # 300 s for the default 4 updates
PPO=(train ppo --data "$D" --updates "$PPO_UPDATES" --batch_size 8 --gen_batch 8 --max_new_tokens 96 --workers 4
	--checkpoint_every "$PPO_UPDATES" --resume=false --reward "$REWARD")
step sft-cpu 240 "$BIN" "${SFT[@]}" --engine native --out checkpoints/sft-cpu
step sft-gpu 240 env GOMLX_BACKEND="$BACKEND" "$BIN" "${SFT[@]}" --engine gomlx --out checkpoints/sft-gpu
step ppo-cpu "$PPO_LIMIT" "$BIN" "${PPO[@]}" --engine native --sft checkpoints/sft-cpu --out checkpoints/ppo-cpu
step ppo-gpu "$PPO_LIMIT" env GOMLX_BACKEND="$BACKEND" "$BIN" "${PPO[@]}" --engine gomlx --sft checkpoints/sft-gpu --out checkpoints/ppo-gpu

# median KEY FILE: the median of KEY over the metrics.jsonl lines after the
# first (compilation, warm-up), "-" when there are none.
median() {
	grep -o "\"$1\":[-0-9.eE+]*" "$2" 2>/dev/null | sed 1d | cut -d: -f2 | sort -g |
		awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) printf "%.1f\n", v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
ck="$D/checkpoints"
echo
echo "=== $gpu vs $(nproc) CPU cores (demo model; medians over updates 2..N)"
printf '%-30s %14s %14s\n' "" "native CPU" "GoMLX $BACKEND"
printf '%-30s %14s %14s\n' "SFT real tokens/s (20 updates)" "$(median charts/tokens_per_s "$ck/sft-cpu/metrics.jsonl")" "$(median charts/tokens_per_s "$ck/sft-gpu/metrics.jsonl")"
printf '%-30s %14s %14s\n' "PPO samples/s ($PPO_UPDATES updates)" "$(median charts/samples_per_s "$ck/ppo-cpu/metrics.jsonl")" "$(median charts/samples_per_s "$ck/ppo-gpu/metrics.jsonl")"
echo "(PPO reward: $REWARD; the CPU figures of the 2-core development machine are in BENCHMARKS.md)"
if [ "$HF" = 1 ]; then
	echo
	echo "=== Qwen2.5-0.5B shape, GoMLX $BACKEND (TF32 on; native's CPU figures are in policy/native/doc.go)"
	grep -h '^gpu-hf:' "$WORK/logs/hf-0.5b.log" | sed 's/^gpu-hf: //'
fi
echo
echo "=== step times (total $(($(date +%s) - START))s)"
printf '%s\n' "${TIMES[@]}"
# Keep the logs and metrics, not the checkpoints (hundreds of MB).
for run in sft-cpu sft-gpu ppo-cpu ppo-gpu; do
	cp "$ck/$run/metrics.jsonl" "$WORK/logs/$run-metrics.jsonl" 2>/dev/null || true
done
rm -rf "$ck"
echo "gpu-check: passed; logs and metrics in $WORK/logs"
