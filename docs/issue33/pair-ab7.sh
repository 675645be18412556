#!/bin/bash
# Issue 33, a seventh session: the bf16 / float32 pair with the session
# start's binary ($1, e.g. pair-532d2e6.test) and this session's ($2)
# alternated A B B A A B B A, 120 interleaved step pairs each, demo shape,
# head at the targets then at every position. Built with
# `GOEXPERIMENT=simd go test -c -o <file> ./policy/native` at each commit.
set -euo pipefail
A=$1 B=$2
lscpu | grep -E "Model name|^Flags" | cut -c1-200
for head in targets full; do
	for t in $A $B $B $A $A $B $B $A; do
		echo -n "$(date -u +%H:%M:%S) $(basename $t) head=$head load $(cut -d' ' -f1 /proc/loadavg): "
		$t -test.run '^$' -test.bench "SFTStepPair/shape=demo/head=$head\$" -test.benchtime 120x 2>&1 | grep Bench | awk '{print $5, "bf16_over_fp32;", $7, "wall;", $9, "bf16_tok/cpu-s;", $11, "fp32_tok/cpu-s"}'
	done
done
