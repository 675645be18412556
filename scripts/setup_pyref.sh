#!/usr/bin/env bash
# Installs the Python reference environment that scripts/hf_reference.py
# runs in: pinned PyTorch, transformers, PEFT and tokenizers from PyPI, in a
# virtual environment at .deps/pyref (git-ignored). Quick when already done.
# `make test` does not call it: the references it makes are committed under
# policy/hf/testdata.
#
# Usage (from anywhere): scripts/setup_pyref.sh
# Set MLERL_PYREF_PYTHON to choose the interpreter that makes the venv
# (default: pyenv's python3.11, else the first python3.11 on PATH that is
# not Debian's /usr/bin one, whose site holds the tasks' apt packages).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.deps/pyref

# The versions the references were made with; the lead's install resolved
# the unpinned dependencies of the first three to the others.
pins=(
  torch==2.15.0        # PyPI's default Linux wheel (a CUDA build; used on the CPU)
  transformers==5.25.0
  peft==0.21.2
  tokenizers==0.23.3
  safetensors==0.8.0
  numpy==2.4.6
  jinja2==3.1.6        # apply_chat_template renders with it
  gguf==0.19.0         # transformers' GGUF loader and the GGUF references (policy/gguf)
)

check() { # prints nothing and succeeds when the venv has every pin
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    got = version(name)
    if got.split("+")[0] != want:
        sys.exit(f"{name} {got} != {want}")
PY
}

if ! check; then
  py=${MLERL_PYREF_PYTHON:-}
  if [ -z "$py" ]; then
    py=$(pyenv which python3.11 2>/dev/null || true)
  fi
  if [ -z "$py" ]; then
    py=$(command -v python3.11 || true)
  fi
  case "$py" in
    "" ) echo "setup_pyref: no python3.11 found; install pyenv's 3.11 or set MLERL_PYREF_PYTHON" >&2; exit 1 ;;
    /usr/bin/*) echo "setup_pyref: $py is Debian's system Python; set MLERL_PYREF_PYTHON to pyenv's python3.11" >&2; exit 1 ;;
  esac
  [ -x "$VENV/bin/python" ] || "$py" -m venv "$VENV"
  echo "setup_pyref: installing ${pins[*]} into $VENV (torch's wheel and its CUDA libraries are several GB)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
  check || { echo "setup_pyref: $VENV still lacks a pinned version after pip install" >&2; exit 1; }
fi
versions=$("$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import peft, tokenizers, torch, transformers
print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, tokenizers {tokenizers.__version__}, gguf {md.version('gguf')}")
PY
)
echo "setup_pyref: ready: $VENV/bin/python ($versions)"
