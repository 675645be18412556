#!/usr/bin/env bash
# Builds llama.cpp, the decoding peer of `make bench`'s real-model rows
# (BENCH_LLM), from PyPI: the sdist of llama-cpp-python (pinned below)
# vendors llama.cpp's source, which is built here with cmake and the
# machine's gcc, for this CPU (-DGGML_NATIVE=ON), without curl. Only the
# tools the bench runs are built: llama-bench (prompt processing and decode
# at batch 1) and llama-batched-bench (decode of many sequences sharing a
# prompt). Everything lands in .deps/llamacpp (git-ignored); quick when
# already done. `make test` never needs it.
#
# Usage (from anywhere): scripts/setup_llamacpp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PIN=0.3.36
DIR=.deps/llamacpp
BIN=$DIR/build/bin
if [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-batched-bench" ] && [ "$(cat "$DIR/PIN" 2>/dev/null)" = "$PIN" ]; then
  echo "setup_llamacpp: ready: $BIN (llama-cpp-python $PIN's llama.cpp)"
  exit 0
fi
command -v cmake >/dev/null || { echo "setup_llamacpp: cmake is missing (apt-get install cmake)" >&2; exit 1; }
command -v g++ >/dev/null || { echo "setup_llamacpp: g++ is missing (apt-get install g++)" >&2; exit 1; }
rm -rf "$DIR" && mkdir -p "$DIR"
echo "setup_llamacpp: fetching the llama-cpp-python==$PIN sdist from PyPI"
pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: "llama-cpp-python==$PIN" -d "$DIR/sdist"
tar xzf "$DIR/sdist/llama_cpp_python-$PIN.tar.gz" -C "$DIR/sdist" "llama_cpp_python-$PIN/vendor/llama.cpp"
mv "$DIR/sdist/llama_cpp_python-$PIN/vendor/llama.cpp" "$DIR/src"
rm -rf "$DIR/sdist"
echo "setup_llamacpp: building llama-bench and llama-batched-bench (GGML_NATIVE=ON, a few minutes)"
cmake -S "$DIR/src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >"$DIR/cmake.log" 2>&1 ||
  { echo "setup_llamacpp: cmake configure failed; see $DIR/cmake.log" >&2; exit 1; }
cmake --build "$DIR/build" -j "$(nproc)" --target llama-bench llama-batched-bench >"$DIR/build.log" 2>&1 ||
  { echo "setup_llamacpp: build failed; see $DIR/build.log" >&2; exit 1; }
echo "$PIN" > "$DIR/PIN"
echo "setup_llamacpp: ready: $BIN (llama-cpp-python $PIN's llama.cpp)"
