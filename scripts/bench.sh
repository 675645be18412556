#!/usr/bin/env bash
# bench.sh: the `make bench` driver.
#
# By default it compares the native CPU engine (policy/native) with the
# PyTorch CPU references on the same batches and shapes, and prints the
# ratios native / PyTorch:
#
#   - SFT real tokens/s on the bench shape (policy/native BenchmarkSFTStep,
#     scripts/bench_torch.py on the batches that benchmark writes), with
#     the LM head at every position ("full") and at the response targets
#     only ("targets");
#   - SFT with bf16 matrix products (BenchmarkSFTStepBF16, and both
#     precisions on the demo recipe's shape, BenchmarkSFTStepDemo) against
#     the float32 path in the same run, where the CPU has AVX512_BF16,
#     and BenchmarkSFTStepPair, the two paths' steps interleaved,
#     beside the bf16 dot-product peak (BenchmarkBF16Peak);
#   - generation new tokens/s on the demo shape with a KV cache, a
#     300-token prompt and 160 new tokens, batch 1 and 8
#     (BenchmarkGenerate, scripts/bench_torch_generate.py).
#
# It also measures the machine's FMA peak (a register-only fused
# multiply-add loop, policy/native BenchmarkFMAPeak: the physical limit,
# against which every row's utilisation is printed too) and its
# matrix-product peak (GFLOP/s of one
# 2,048^3 product, 1 and 2 threads, native BenchmarkGemmPeak and
# scripts/bench_torch_gemm.py) and prints each benchmark's model FLOP
# utilisation against it, and the PPO learner step with shared prompts
# against the SFT step of the same shape (BenchmarkPPOLearner, native),
# and generation against a second peer on the same weights: ONNX Runtime
# (policy/onnxpeer BenchmarkGeneratePeer: the demo policy's shape,
# 448-token prompts, 96 new tokens, batch 1 and 32, both engines with
# GOMAXPROCS 2 threads; ONNX Runtime with its default spinning threads,
# without spinning, and without spinning decoding in place; idle only;
# skipped when `make setup` has not installed the library).
#
# PyTorch runs with 1 and 2 threads and the ratio takes the better one;
# the native engine runs with GOMAXPROCS 2 (the ratio) and 1. Everything is
# measured twice: on the machine as it is ("idle": nothing of ours
# running besides the benchmark) and with one core kept busy by a
# `yes > /dev/null` pinned to CPU 0 that the script starts and kills
# ("contended"); the second table gives each side's slowdown.
#
#   scripts/bench.sh                      # full comparison, ~10-15 min on 2 cores
#   BENCH_QUICK=1 scripts/bench.sh        # short version (fewer steps, no GOMAXPROCS=1), ~2-3 min
#   BENCH_CONTENTION=0 scripts/bench.sh   # skip the contended half
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
PY="${PY:-/usr/bin/python3}"
QUICK="${BENCH_QUICK:-0}"
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
torch="$("$PY" -c 'import torch, re; c = torch.__config__.show(); m = re.search(r"CPU capability usage: (\S+)", c); print(torch.__version__, "(its CPU kernels:", (m.group(1) if m else "?") + ")")' 2>/dev/null || echo "not installed")"
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown; }
echo "# mlerl benchmarks"
echo "# date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)"
family="$(lscpu 2>/dev/null | awk -F: '/^CPU family/ {f=$2} /^Model:/ {m=$2} /^Vendor ID/ {v=$2} END {gsub(/ /, "", f); gsub(/ /, "", m); gsub(/ /, "", v); if (v != "") printf "%s family %s model %s", v, f, m}')"
echo "# machine:  $(nproc) cores, ${cpu:-unknown CPU}${family:+ ($family)}, ${mem:-unknown memory}"
echo "# flags:   $flags"
echo "# load:     $(load) (1/5/15 min, before the run)"
echo "# go:       $($GO version | cut -d' ' -f3-) GOEXPERIMENT=$GOEXPERIMENT"
echo "# torch:    $torch"
blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)"
[ -z "$blas" ] || echo "# blas:     $blas (libblas.so.3; OMP_NUM_THREADS and OPENBLAS_NUM_THREADS = the PyTorch thread count)"
echo "# revision: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
echo "# command:  BENCH_QUICK=$QUICK BENCH_CONTENTION=$CONTENTION${BENCH_ENGINES:+ BENCH_ENGINES=$BENCH_ENGINES} scripts/bench.sh$([ "$GENERIC" = 1 ] && echo " (BENCH='$BENCH' PKGS='$PKGS')")"

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
	echo "bench.sh: $PY cannot import torch (make bench runs MLERL_SETUP_TORCH=1 scripts/setup.sh)" >&2
	exit 1
fi
if [ "$QUICK" = 1 ]; then
	SFT_GO=3x SFT_PY=3 SFT_PY_S=3 GEN1_GO=1x GEN8_GO=1x GEN_PY=1 GEN_PY_S=2 PROCS="2" PEAK_GO=3x PEAK_PY=3 PPO_GO=1x PEER_GO=1x
else
	SFT_GO=20x SFT_PY=20 SFT_PY_S=20 GEN1_GO=6x GEN8_GO=2x GEN_PY=3 GEN_PY_S=20 PROCS="2 1" PEAK_GO=10x PEAK_PY=10 PPO_GO=3x PEER_GO=2x
fi
# bf16 rows: where the CPU has AVX512_BF16 (the engine's own check decides;
# its benchmarks skip without it).
BF16=0
if grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' | grep -qx avx512_bf16 && grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx avx512bw; then
	BF16=1
fi
tmp="$(mktemp -d -t mlerl-bench.XXXXXX)"
busy=""
cleanup() {
	if [ -n "$busy" ]; then kill "$busy" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
"$GO" test -c -o "$tmp/native.test" ./policy/native
"$GO" test -c -o "$tmp/peer.test" ./policy/onnxpeer
results="$tmp/results.tsv"
flops="$tmp/flops.tsv"
: >"$results"
: >"$flops"

echo
echo "# SFT: policy/native BenchmarkSFTStep ($SFT_GO, after 5 warm-up steps) vs scripts/bench_torch.py ($SFT_PY steps or ${SFT_PY_S} s, after 1 warm-up step)"
echo "# generation: BenchmarkGenerate (batch 1: $GEN1_GO, batch 8: $GEN8_GO) vs scripts/bench_torch_generate.py ($GEN_PY generations or ${GEN_PY_S} s, after a short warm-up)"
echo "# the native engine: go test -c ./policy/native, then native.test -test.run '^\$' -test.bench '<name>' -test.benchtime <n>x with GOMAXPROCS $PROCS"

# metric UNIT: the value before UNIT on a `go test -bench` line.
metric() { awk -v u="$1" '/^Benchmark/ { for (i = 1; i < NF; i++) if ($(i + 1) == u) print $i }'; }
# jfield KEY: a field of the JSON line on stdin.
jfield() { "$PY" -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
# record COND BENCH IMPL THREADS TOK_S TOK_CPU_S
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"; }

native() { # native COND BENCH PATTERN BENCHTIME UNIT CPU_UNIT
	local cond="$1" name="$2" pat="$3" bt="$4" unit="$5" cpuunit="$6" procs out
	for procs in $PROCS; do
		out="$(GOMAXPROCS=$procs MLERL_BENCH_DATA="$tmp/sft.bin" "$tmp/native.test" -test.run '^$' -test.bench "$pat" -test.benchtime "$bt" 2>&1)" || {
			echo "$out" >&2
			exit 1
		}
		echo "$out" | grep '^Benchmark' | sed "s/^/  [$cond, GOMAXPROCS=$procs, load $(load)] /"
		record "$cond" "$name" native "$procs" "$(echo "$out" | metric "$unit")" "$(echo "$out" | metric "$cpuunit")"
		printf '%s\t%s\n' "$name" "$(echo "$out" | metric flop/tok)" >>"$flops"
	done
}
peak() { # peak COND: the FMA peak (register-only loop) and GEMM GFLOP/s, native and PyTorch, 1 and 2 threads
	local cond="$1" t out
	for t in 1 2; do
		out="$(GOMAXPROCS=$t "$tmp/native.test" -test.run '^$' -test.bench 'FMAPeak' -test.benchtime 200x 2>&1)" || {
			echo "$out" >&2
			exit 1
		}
		echo "$out" | grep '^Benchmark' | sed "s/^/  [$cond, GOMAXPROCS=$t, load $(load)] /"
		record "$cond" fma native "$t" "$(echo "$out" | metric GFLOP/s)" "$(echo "$out" | metric GFLOP/cpu-s)"
		if [ "$BF16" = 1 ]; then
			out="$(GOMAXPROCS=$t "$tmp/native.test" -test.run '^$' -test.bench 'BF16Peak' -test.benchtime 200x 2>&1)" || {
				echo "$out" >&2
				exit 1
			}
			echo "$out" | grep '^Benchmark' | sed "s/^/  [$cond, GOMAXPROCS=$t, load $(load)] /"
			record "$cond" bf16peak native "$t" "$(echo "$out" | metric GFLOP/s)" "$(echo "$out" | metric GFLOP/cpu-s)"
		fi
	done
	for t in 1 2; do
		out="$(GOMAXPROCS=$t "$tmp/native.test" -test.run '^$' -test.bench 'GemmPeak' -test.benchtime "$PEAK_GO" 2>&1)" || {
			echo "$out" >&2
			exit 1
		}
		echo "$out" | grep '^Benchmark' | sed "s/^/  [$cond, GOMAXPROCS=$t, load $(load)] /"
		record "$cond" gemm native "$t" "$(echo "$out" | metric GFLOP/s)" "$(echo "$out" | metric GFLOP/cpu-s)"
		out="$(OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t MKL_NUM_THREADS=$t "$PY" scripts/bench_torch_gemm.py "$t" "$PEAK_PY" 20)"
		echo "  [$cond, load $(load)] $out"
		record "$cond" gemm torch "$t" "$(echo "$out" | jfield gflop_per_s)" "$(echo "$out" | jfield gflop_per_cpu_s)"
	done
}
ppo() { # ppo COND: BenchmarkPPOLearner (native, GOMAXPROCS=2)
	local cond="$1" out sub
	out="$(GOMAXPROCS=2 "$tmp/native.test" -test.run '^$' -test.bench 'PPOLearner' -test.benchtime "$PPO_GO" 2>&1)" || {
		echo "$out" >&2
		exit 1
	}
	echo "$out" | grep '^Benchmark' | sed "s/^/  [$cond, GOMAXPROCS=2, load $(load)] /"
	for sub in sft unshared shared; do
		record "$cond" "ppo-$sub" native 2 "$(echo "$out" | grep "/$sub-" | metric real_tok/s)" "$(echo "$out" | grep "/$sub-" | metric real_tok/cpu-s)"
		record "$cond" "ppo-$sub-sample" native 2 "$(echo "$out" | grep "/$sub-" | metric sample_tok/s)" "$(echo "$out" | grep "/$sub-" | metric sample_tok/cpu-s)"
	done
}
peer() { # peer COND: BenchmarkGeneratePeer (native vs ONNX Runtime, GOMAXPROCS=2 and 2 intra-op threads)
	local cond="$1" out impl b phase
	out="$(GOMAXPROCS=2 "$tmp/peer.test" -test.run '^$' -test.bench 'GeneratePeer' -test.benchtime "$PEER_GO" 2>&1)" || {
		echo "$out" >&2
		exit 1
	}
	if echo "$out" | grep -q 'SKIP'; then
		echo "  [$cond] BenchmarkGeneratePeer skipped: $(echo "$out" | grep -m1 'ONNX Runtime')"
		return
	fi
	echo "$out" | grep '^Benchmark' | sed "s/^/  [$cond, GOMAXPROCS=2, load $(load)] /"
	for impl in native ort ort-nospin ort-inplace-nospin; do
		for b in 1 32; do
			for phase in prefill decode new; do
				record "$cond" "peer-b$b-$phase" "$impl" 2 "$(echo "$out" | grep "engine=$impl/batch=$b-" | metric "${phase}_tok/s")" "$(echo "$out" | grep "engine=$impl/batch=$b-" | metric "${phase}_tok/cpu-s")"
			done
		done
	done
}
torch() { # torch COND BENCH THREADS SCRIPT ARGS...
	local cond="$1" name="$2" threads="$3" out
	shift 3
	# Debian's torch calls its BLAS (OpenBLAS) through libblas.so.3 without
	# setting that library's threads: without OPENBLAS_NUM_THREADS a
	# "1-thread" run would still multiply matrices on every core.
	out="$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads "$PY" "$@")"
	echo "  [$cond, load $(load)] $out"
	case "$name" in
	sft-*) record "$cond" "$name" torch "$threads" "$(echo "$out" | jfield real_tok_per_s)" "$(echo "$out" | jfield real_tok_per_cpu_s)" ;;
	*) record "$cond" "$name" torch "$threads" "$(echo "$out" | jfield new_tok_per_s)" "$(echo "$out" | jfield new_tok_per_cpu_s)" ;;
	esac
}

pair() { # pair COND: bf16 against float32 with their steps interleaved (BenchmarkSFTStepPair), 2 threads
	local cond="$1" out line name
	out="$(MLERL_BENCH_DATA="$tmp/sft.bin" "$tmp/native.test" -test.run '^$' -test.bench 'SFTStepPair' -test.benchtime "$SFT_GO" 2>&1)" || {
		echo "$out" >&2
		exit 1
	}
	echo "$out" | grep '^Benchmark' | sed "s/^/  [$cond, GOMAXPROCS=$(nproc), load $(load)] /"
	while read -r line; do
		name="$(echo "$line" | sed -E 's#^BenchmarkSFTStepPair/shape=([a-z]+)/head=([a-z]+).*#pair-\1-\2#')"
		record "$cond" "$name" native 2 "$(echo "$line" | metric bf16_over_fp32_wall)" "$(echo "$line" | metric bf16_over_fp32)"
	done < <(echo "$out" | grep '^BenchmarkSFTStepPair/')
}

measure() { # measure COND
	local cond="$1" head b t
	echo
	echo "## $cond (load before: $(load))"
	for head in full targets; do
		native "$cond" "sft-$head" "SFTStep\$/.*/head=$head\$" "$SFT_GO" real_tok/s real_tok/cpu-s
		for t in 1 2; do
			torch "$cond" "sft-$head" "$t" scripts/bench_torch.py "$tmp/sft.bin" "$SFT_PY" "$t" "$head" "$SFT_PY_S"
		done
		if [ "$BF16" = 1 ]; then
			native "$cond" "sft-$head-bf16" "SFTStepBF16/.*/head=$head\$" "$SFT_GO" real_tok/s real_tok/cpu-s
			native "$cond" "sftdemo-$head" "SFTStepDemo/matmul=fp32/.*/head=$head\$" "$SFT_GO" real_tok/s real_tok/cpu-s
			native "$cond" "sftdemo-$head-bf16" "SFTStepDemo/matmul=bf16/.*/head=$head\$" "$SFT_GO" real_tok/s real_tok/cpu-s
		fi
	done
	if [ "$BF16" = 1 ]; then
		pair "$cond"
	fi
	for b in 1 8; do
		bt="$GEN1_GO"
		[ "$b" = 8 ] && bt="$GEN8_GO"
		native "$cond" "gen-b$b" "Generate/.*/batch=$b\$" "$bt" new_tok/s new_tok/cpu-s
		for t in 1 2; do
			torch "$cond" "gen-b$b" "$t" scripts/bench_torch_generate.py "$t" "$b" "$GEN_PY" "$GEN_PY_S"
		done
	done
}

start=$(date +%s)
echo
echo "## the machine's GEMM peak, the PPO learner and the ONNX Runtime peer (load before: $(load))"
peak idle
ppo idle
peer idle
measure idle
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
"$PY" - "$results" "$flops" <<'EOF'
import collections, sys

rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    cond, name, impl, threads, tok, cpu = line.rstrip("\n").split("\t")
    rows[(cond, name, impl, int(threads))] = (float(tok or "nan"), float(cpu or "nan"))
flop_per_tok = {}
for line in open(sys.argv[2]):
    name, f = line.rstrip("\n").split("\t")
    if f:
        flop_per_tok[name] = float(f)

names = [("sft-full", "SFT, LM head at every position (real tok/s)"),
         ("sft-targets", "SFT, LM head at the targets only (real tok/s)"),
         ("gen-b1", "generation, batch 1 (new tok/s, prefill included)"),
         ("gen-b8", "generation, batch 8 (new tok/s, prefill included)")]
conds = [c for c in ("idle", "contended") if any(k[0] == c and k[1] in dict(names) for k in rows)]

def get(cond, name, impl, t):
    return rows.get((cond, name, impl, t), (float("nan"), float("nan")))

print()
print("### the machine's GEMM peak (one 2,048^3 float32 product; GFLOP/s, per CPU-second in brackets)")
print()
print("| threads | native | PyTorch | peak (the better) |")
print("|---:|---:|---:|---:|")
peak, peak_cpu = {}, 0.0
for t in (1, 2):
    n, p = get("idle", "gemm", "native", t), get("idle", "gemm", "torch", t)
    peak[t] = max(n[0], p[0])
    peak_cpu = max(peak_cpu, n[1], p[1])
    print(f"| {t} | {n[0]:,.1f} ({n[1]:,.1f}) | {p[0]:,.1f} ({p[1]:,.1f}) | {peak[t]:,.1f} ({max(n[1], p[1]):,.1f}) |")

print()
print("### the machine's FMA peak (register-only float32 fused multiply-adds, the widest vectors the CPU has; GFLOP/s, per CPU-second in brackets), and the GEMM peak as a share of it")
print()
print("| threads | FMA peak | GEMM peak / FMA peak | bf16 dot-product peak (VDPBF16PS) |")
print("|---:|---:|---:|---:|")
fma, fma_cpu, bfp, bfp_cpu = {}, 0.0, {}, 0.0
for t in (1, 2):
    f, h = get("idle", "fma", "native", t), get("idle", "bf16peak", "native", t)
    fma[t], bfp[t] = f[0], h[0]
    fma_cpu, bfp_cpu = max(fma_cpu, f[1]), max(bfp_cpu, h[1])
    hcell = f"{h[0]:,.1f} ({h[1]:,.1f})" if h[0] == h[0] else "- (no AVX512_BF16)"
    print(f"| {t} | {f[0]:,.1f} ({f[1]:,.1f}) | {peak[t] / f[0] * 100:.0f}% | {hcell} |")

for cond in conds:
    print()
    print(f"### native / PyTorch, {cond}: tokens/s (tokens per CPU-second in brackets)")
    print()
    print("| benchmark | native (2 threads) | PyTorch 1 thread | PyTorch 2 threads | ratio native / best PyTorch | ratio per CPU-second |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, label in names:
        n, t1, t2 = get(cond, name, "native", 2), get(cond, name, "torch", 1), get(cond, name, "torch", 2)
        best = max(t1[0], t2[0])
        best_cpu = max(t1[1], t2[1])
        print(f"| {label} | {n[0]:,.0f} ({n[1]:,.0f}) | {t1[0]:,.0f} ({t1[1]:,.0f}) | {t2[0]:,.0f} ({t2[1]:,.0f}) "
              f"| **{n[0] / best:.2f}x** | {n[1] / best_cpu:.2f}x |")

print()
print("### model FLOP utilisation: against the GEMM peak at the same thread count (per CPU-second: against the best GEMM GFLOP per CPU-second, in brackets)")
print()
print("model FLOPs: the matrix products of the step (dense layers per token, attention per real query-key pair, LM head where it runs), backward = 2x forward; see policy/native/bench_test.go. The peaks are the idle half's.")
print()
print("| condition | benchmark | MFLOP per token | native (2 threads) | native (1 thread) | PyTorch 1 thread | PyTorch 2 threads |")
print("|---|---|---:|---:|---:|---:|---:|")
for cond in conds:
    for name, label in names:
        f = flop_per_tok.get(name, float("nan"))
        cells = []
        for impl, t in (("native", 2), ("native", 1), ("torch", 1), ("torch", 2)):
            tok, cpu = get(cond, name, impl, t)
            cells.append(f"{tok * f / 1e9 / peak[t] * 100:.1f}% ({cpu * f / 1e9 / peak_cpu * 100:.1f}%)" if tok == tok else "-")
        print(f"| {cond} | {name} | {f / 1e6:.2f} | " + " | ".join(cells) + " |")

print()
print("### model FLOP utilisation against the FMA peak (the physical limit) at the same thread count (per CPU-second: against the FMA peak per CPU-second, in brackets)")
print()
print("| condition | benchmark | native (2 threads) | native (1 thread) | PyTorch 1 thread | PyTorch 2 threads |")
print("|---|---|---:|---:|---:|---:|")
for cond in conds:
    for name, label in names:
        f = flop_per_tok.get(name, float("nan"))
        cells = []
        for impl, t in (("native", 2), ("native", 1), ("torch", 1), ("torch", 2)):
            tok, cpu = get(cond, name, impl, t)
            cells.append(f"{tok * f / 1e9 / fma[t] * 100:.1f}% ({cpu * f / 1e9 / fma_cpu * 100:.1f}%)" if tok == tok else "-")
        print(f"| {cond} | {name} | " + " | ".join(cells) + " |")

bf16rows = [("sft-full", "SFT, bench shape, LM head at every position"), ("sft-targets", "SFT, bench shape, LM head at the targets only"),
            ("sftdemo-full", "SFT, demo recipe's shape, LM head at every position"), ("sftdemo-targets", "SFT, demo recipe's shape, LM head at the targets only")]
if any(k[1].endswith("-bf16") for k in rows):
    for cond in conds:
        print()
        print(f"### bf16 products vs float32, same engine, same run, {cond} (native, GOMAXPROCS=2): real tokens/s (per CPU-second in brackets)")
        print()
        print("bf16: the dense layers' and the attention's products (heads of 64 values or more) with bf16 inputs and float32 sums (AVX512_BF16), float32 weights and optimizer state; MFU against the FMA peak (float32) and the bf16 dot-product peak (bf16), 2 threads.")
        print()
        print("| benchmark | float32 | bf16 | bf16 / float32 | per CPU-second | MFU float32 | MFU bf16 |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, label in bf16rows:
            a, b = get(cond, name, "native", 2), get(cond, name + "-bf16", "native", 2)
            f = flop_per_tok.get(name, float("nan"))
            print(f"| {label} | {a[0]:,.0f} ({a[1]:,.0f}) | {b[0]:,.0f} ({b[1]:,.0f}) | **{b[0] / a[0]:.2f}x** | **{b[1] / a[1]:.2f}x** "
                  f"| {a[0] * f / 1e9 / fma[2] * 100:.1f}% | {b[0] * f / 1e9 / bfp[2] * 100:.1f}% |")
        if any(k[0] == cond and k[1].startswith("pair-") for k in rows):
            print()
            print(f"The same ratio with the two paths' steps interleaved in one process (BenchmarkSFTStepPair: same batches, one step each in turn; a shared host's drift falls on both), {cond}:")
            print()
            print("| benchmark | bf16 / float32, wall | per CPU-second |")
            print("|---|---:|---:|")
            for name, label in bf16rows:
                shape = "demo" if name.startswith("sftdemo") else "bench"
                r = get(cond, f"pair-{shape}-{name.split('-')[1]}", "native", 2)
                print(f"| {label} | {r[0]:.2f}x | **{r[1]:.2f}x** |")
        print()
        print(f"bf16 SFT rows against PyTorch (float32, the better of 1 and 2 threads), {cond}:")
        print()
        print("| benchmark | native bf16 | ratio native bf16 / best PyTorch | ratio per CPU-second |")
        print("|---|---:|---:|---:|")
        for name, label in bf16rows[:2]:
            b, t1, t2 = get(cond, name + "-bf16", "native", 2), get(cond, name, "torch", 1), get(cond, name, "torch", 2)
            print(f"| {label} | {b[0]:,.0f} ({b[1]:,.0f}) | **{b[0] / max(t1[0], t2[0]):.2f}x** | {b[1] / max(t1[1], t2[1]):.2f}x |")

if any(k[1].startswith("ppo-") for k in rows):
    print()
    print("### PPO learner step vs SFT step, same engine and shape (native, GOMAXPROCS=2, idle; BenchmarkPPOLearner)")
    print()
    print("| step | real tok/s (per CPU-s) | sample tok/s (per CPU-s) | real tok/s vs SFT | per CPU-s vs SFT |")
    print("|---|---:|---:|---:|---:|")
    sft = get("idle", "ppo-sft", "native", 2)
    for sub, label in (("sft", "SFT, same samples and head positions"), ("unshared", "PPO, each sample with its prompt"), ("shared", "PPO, shared prompts (Batch.Prefix)")):
        r, smp = get("idle", f"ppo-{sub}", "native", 2), get("idle", f"ppo-{sub}-sample", "native", 2)
        print(f"| {label} | {r[0]:,.0f} ({r[1]:,.0f}) | {smp[0]:,.0f} ({smp[1]:,.0f}) | **{r[0] / sft[0]:.2f}x** | {r[1] / sft[1]:.2f}x |")

if any(k[1].startswith("peer-") for k in rows):
    print()
    print("### generation, native vs ONNX Runtime on the same weights (demo shape, 448-token prompts, 96 new tokens; GOMAXPROCS=2 and 2 intra-op threads, idle; BenchmarkGeneratePeer): tokens/s (per CPU-second in brackets)")
    print()
    print("ORT: ONNX Runtime with policy/onnxpeer's graphs; its intra-op threads spin between tasks by default (\"spin\"); \"in place\" decodes with the cache updated in place (Graphs.DecodeInPlace) instead of the standard past -> present copy. Ratios: native / ORT.")
    print()
    print("| batch | phase | native | ORT, spin | ORT, no spin | ORT, in place, no spin | ratio vs spin | per CPU-s | ratio vs no spin | per CPU-s | ratio vs in place | per CPU-s |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in (1, 32):
        for phase, label in (("prefill", "prefill (prompt tok/s)"), ("decode", "decode (new tok/s)"), ("new", "whole generation (new tok/s)")):
            n, *ort = (get("idle", f"peer-b{b}-{phase}", impl, 2) for impl in ("native", "ort", "ort-nospin", "ort-inplace-nospin"))
            print(f"| {b} | {label} | {n[0]:,.0f} ({n[1]:,.0f}) | " + " | ".join(f"{o[0]:,.0f} ({o[1]:,.0f})" for o in ort) + " | "
                  + " | ".join(f"**{n[0] / o[0]:.2f}x** | {n[1] / o[1]:.2f}x" for o in ort) + " |")

if "contended" in conds:
    print()
    print("### idle vs one core busy (`taskset -c 0 yes`): tokens/s and slowdown (idle / contended)")
    print()
    print("| benchmark | side | idle | contended | slowdown |")
    print("|---|---|---:|---:|---:|")
    for name, label in names:
        for impl, t, side in (("native", 2, "native, GOMAXPROCS=2"), ("native", 1, "native, GOMAXPROCS=1"),
                              ("torch", 1, "PyTorch, 1 thread"), ("torch", 2, "PyTorch, 2 threads")):
            a, b = get("idle", name, impl, t)[0], get("contended", name, impl, t)[0]
            if a != a and b != b:  # not measured (BENCH_QUICK has no GOMAXPROCS=1)
                continue
            print(f"| {name} | {side} | {a:,.0f} | {b:,.0f} | {a / b:.2f}x |")
EOF
