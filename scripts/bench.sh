#!/usr/bin/env bash
# bench.sh: the `make bench` driver. Runs every Benchmark function of the
# repository (or those selected) once and prints the results with the
# machine they ran on, ready to paste into BENCHMARKS.md.
#
#   scripts/bench.sh                         # all benchmarks, one iteration each
#   BENCH=Steps PKGS=./internal/datasets scripts/bench.sh
#   BENCHTIME=3x COUNT=2 scripts/bench.sh    # more iterations / repeats
#
# Environment: BENCH (regexp, default "."), PKGS (default "./..."),
# BENCHTIME (default 1x: the benchmarks are sized to take seconds once),
# COUNT (default 1), BENCH_TIMEOUT (default 60m).
set -euo pipefail
cd "$(dirname "$0")/.."

export GOEXPERIMENT="${GOEXPERIMENT:-simd}"
export MLERL_DEPS="${MLERL_DEPS:-$PWD/.deps}"
BENCH="${BENCH:-.}"
PKGS="${PKGS:-./...}"
BENCHTIME="${BENCHTIME:-1x}"
COUNT="${COUNT:-1}"
GO="${GO:-go}"
# BenchmarkSFT writes its batches here for the PyTorch reference below.
export MLERL_BENCH_DATA="${MLERL_BENCH_DATA:-$(mktemp -t mlerl-sft-batches.XXXXXX)}"

cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
mem="$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo 2>/dev/null || true)"
echo "# mlerl benchmarks"
echo "# date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# machine:  $(nproc) cores, ${cpu:-unknown CPU}, ${mem:-unknown memory}"
echo "# load:     $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown) (1/5/15 min, before the run)"
echo "# go:       $($GO version | cut -d' ' -f3-) GOEXPERIMENT=$GOEXPERIMENT"
echo "# revision: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
echo "# command:  $GO test -run '^\$' -bench '$BENCH' -benchtime $BENCHTIME -count $COUNT -benchmem $PKGS"
echo
# -run '^$' skips the tests; packages without benchmarks print nothing.
"$GO" test -run '^$' -bench "$BENCH" -benchtime "$BENCHTIME" -count "$COUNT" -benchmem \
	-timeout "${BENCH_TIMEOUT:-60m}" $PKGS 2>&1 | grep -v -e '^?' -e '^PASS$' -e 'no test files'

# The trainer's PyTorch CPU reference (train/BenchmarkSFT writes its batches
# to MLERL_BENCH_DATA; scripts/bench_torch.py trains the same model on them).
if [ -s "${MLERL_BENCH_DATA:-}" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	echo
	echo "# PyTorch CPU reference on BenchmarkSFT's batches (scripts/bench_torch.py, 2 threads):"
	/usr/bin/python3 scripts/bench_torch.py "$MLERL_BENCH_DATA" 6 2 full
	/usr/bin/python3 scripts/bench_torch.py "$MLERL_BENCH_DATA" 6 2 targets
fi
