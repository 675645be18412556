#!/usr/bin/env bash
# Installs the trainers mlerl hands its data to, from PyPI, into the
# virtual environment `make interop` checks them in: LLaMA-Factory
# (SFT) and verl (RL) with the transformers, PEFT and PyTorch both
# accept, at .deps/interop (git-ignored; reused when it already holds
# every pin). `make test` never calls it.
#
# One venv serves both: llamafactory 0.9.5 wants transformers <= 5.6.0
# and peft 0.18.x, verl 0.9.1 wants transformers >= 5.5.3, < 5.11,
# != 5.6.0; transformers 5.5.4 is in both ranges. PyTorch 2.11.0 is the
# one verl's own extras pin and the newest with a torchaudio
# (LLaMA-Factory needs torchaudio and torchvision). verl's "verl-core"
# extra brings what its trainer imports (TransferQueue, cachetools...);
# its "cpu"/"vllm" extras pin transformers 5.9.0, which LLaMA-Factory
# refuses, so they are not installed (see scripts/verl_gpu_check.sh).
#
# Usage (from anywhere): scripts/setup_interop.sh
# MLERL_INTEROP_VENV: the venv's folder (default .deps/interop).
# MLERL_INTEROP_PYTHON: the interpreter that makes it (default pyenv's
# python3.11; not Debian's /usr/bin one, whose site holds the tasks'
# apt packages).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MLERL_INTEROP_VENV:-.deps/interop}
CONSTRAINTS=scripts/interop/constraints.txt

pins=(
  torch==2.11.0        # PyPI's default Linux wheel (a CUDA build, ~4.5 GB with its nvidia-* wheels; used on the CPU)
  torchvision==0.26.0
  torchaudio==2.11.0
  transformers==5.5.4
  peft==0.18.1
  accelerate==1.11.0
  trl==0.24.0
  datasets==4.0.0
  llamafactory==0.9.5
  verl[verl-core]==0.9.1
  tensordict==0.10.0
)

check() { # prints nothing and succeeds when the venv has every pin
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null
import re, sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    name = re.sub(r"\[.*\]", "", name)
    if version(name).split("+")[0] != want:
        sys.exit(1)
PY
}

if ! check; then
  py=${MLERL_INTEROP_PYTHON:-}
  [ -n "$py" ] || py=$(pyenv which python3.11 2>/dev/null || true)
  [ -n "$py" ] || py=$(command -v python3.11 || true)
  case "$py" in
    "" ) echo "setup_interop: no python3.11 found; install pyenv's 3.11 or set MLERL_INTEROP_PYTHON" >&2; exit 1 ;;
    /usr/bin/*) echo "setup_interop: $py is Debian's system Python; set MLERL_INTEROP_PYTHON to pyenv's python3.11" >&2; exit 1 ;;
  esac
  t0=$(date +%s)
  [ -x "$VENV/bin/python" ] || "$py" -m venv "$VENV"
  echo "setup_interop: installing ${pins[*]} into $VENV (PyTorch's wheel and its CUDA libraries are several GB; about 9 minutes the first time)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "${pins[@]}"
  check || { echo "setup_interop: $VENV still lacks a pinned version after pip install" >&2; exit 1; }
  echo "setup_interop: installed in $(( $(date +%s) - t0 ))s, $(du -sh "$VENV" | cut -f1)"
fi
echo "setup_interop: ready: $VENV/bin/python ($("$VENV/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("llamafactory", "verl", "transformers", "peft", "torch")))'))"
