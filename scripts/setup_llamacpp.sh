#!/usr/bin/env bash
# Builds llama.cpp, the decoding peer of `make bench`'s real-model rows
# (BENCH_LLM), from PyPI: the sdist of llama-cpp-python (pinned below)
# vendors llama.cpp's source, which is built here with cmake and the
# machine's gcc, for this CPU (-DGGML_NATIVE=ON), without curl. Only the
# tools the bench runs are built: llama-bench (prompt processing and decode
# at batch 1) and llama-batched-bench (decode of many sequences sharing a
# prompt), llama-quantize and llama-gguf-split (the k-quant mixes and the
# split model scripts/gguf_mixes.sh checks the GGUF reader on). Everything lands in .deps/llamacpp
# (git-ignored); quick when already done. `make test` never needs it.
#
# Without AMX: -march=native turns on ggml's AMX kernels on a CPU with AMX
# (Sapphire Rapids onward), and with this source and GCC 12 they die on
# their first tile load (SIGILL in tinygemm_kernel_amx, measured on a Xeon
# family 6 model 207: the tile configuration kept on the stack is
# optimised away; llama.cpp PR 26954). The build keeps every other
# instruction set of -march=native (AVX-512, VNNI, BF16) and passes
# -mno-amx-*, which GCC applies whatever their order; BUILD below records
# it, so a tree built before is rebuilt.
#
# Usage (from anywhere): scripts/setup_llamacpp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PIN=0.3.36
NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
BUILD="$PIN GGML_NATIVE=ON $NOAMX"
DIR=.deps/llamacpp
BIN=$DIR/build/bin
TOOLS="llama-bench llama-batched-bench llama-quantize llama-gguf-split"
if [ "$(cat "$DIR/PIN" 2>/dev/null)" = "$BUILD" ] && ! for t in $TOOLS; do [ -x "$BIN/$t" ] || echo missing; done | grep -q missing; then
  echo "setup_llamacpp: ready: $BIN (llama-cpp-python $PIN's llama.cpp)"
  exit 0
fi
command -v cmake >/dev/null || { echo "setup_llamacpp: cmake is missing (apt-get install cmake)" >&2; exit 1; }
command -v g++ >/dev/null || { echo "setup_llamacpp: g++ is missing (apt-get install g++)" >&2; exit 1; }
if [ -f "$DIR/src/CMakeLists.txt" ] && [ "$(cat "$DIR/SRC_PIN" 2>/dev/null)" = "$PIN" ]; then
  # The source is the pinned one: a build of other flags is redone, one
  # that only lacks a tool gets it added.
  [ "$(cat "$DIR/PIN" 2>/dev/null)" = "$BUILD" ] || rm -rf "$DIR/build" "$DIR/PIN"
else
  rm -rf "$DIR" && mkdir -p "$DIR"
  echo "setup_llamacpp: fetching the llama-cpp-python==$PIN sdist from PyPI"
  pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: "llama-cpp-python==$PIN" -d "$DIR/sdist"
  tar xzf "$DIR/sdist/llama_cpp_python-$PIN.tar.gz" -C "$DIR/sdist" "llama_cpp_python-$PIN/vendor/llama.cpp"
  mv "$DIR/sdist/llama_cpp_python-$PIN/vendor/llama.cpp" "$DIR/src"
  rm -rf "$DIR/sdist"
  echo "$PIN" > "$DIR/SRC_PIN"
fi
echo "setup_llamacpp: building $TOOLS (GGML_NATIVE=ON without AMX, a few minutes)"
cmake -S "$DIR/src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DCMAKE_C_FLAGS="$NOAMX" -DCMAKE_CXX_FLAGS="$NOAMX" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >"$DIR/cmake.log" 2>&1 ||
  { echo "setup_llamacpp: cmake configure failed; see $DIR/cmake.log" >&2; exit 1; }
cmake --build "$DIR/build" -j "$(nproc)" --target $TOOLS >"$DIR/build.log" 2>&1 ||
  { echo "setup_llamacpp: build failed; see $DIR/build.log" >&2; exit 1; }
echo "$BUILD" > "$DIR/PIN"
echo "setup_llamacpp: ready: $BIN (llama-cpp-python $PIN's llama.cpp)"
