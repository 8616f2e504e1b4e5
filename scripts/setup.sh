#!/usr/bin/env bash
# Idempotent setup: .venv in the repo with the project (editable) and its test extras.
# A torch that is already importable (in .venv, or in the base python3) is kept; otherwise
# TORCH_SPEC (default torch==2.13.0, the CPU build) is installed. Set TORCH_SPEC to override.
# The other packages are pinned by scripts/constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
if [ ! -x .venv/bin/python ]; then
  if "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "setup: base $PYTHON already has torch; creating .venv that can see it"
    "$PYTHON" -m venv --system-site-packages .venv
  else
    "$PYTHON" -m venv .venv
  fi
fi
VPY=.venv/bin/python
# PSI's group, ristretto255 (vfl/align/psi/ecdh.py), comes from the system's libsodium >= 1.0.18: PyNaCl neither binds
# nor ships those functions. Debian's libsodium23 is installed when it is missing and this user may install packages.
if ! "$PYTHON" -c "import ctypes.util, sys; sys.exit(ctypes.util.find_library('sodium') is None)" 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing libsodium23 (the PSI's ristretto255 group)"
    apt-get install -y -q libsodium23 >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libsodium23 >/dev/null 2>&1; } \
      || echo "setup: warning: libsodium23 could not be installed; PSI will stop until it is (apt-get install libsodium23)" >&2
  else
    echo "setup: warning: no libsodium found; PSI needs libsodium >= 1.0.18 (apt-get install libsodium23, or brew install libsodium)" >&2
  fi
fi
stamp=.venv/.vfl-setup-stamp
want=$(cat pyproject.toml scripts/constraints.txt | sha256sum | cut -d' ' -f1)
# the fast path finds the packages without importing them (importing torch and sklearn costs seconds, and every
# launch script passes here)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && $VPY -c "
import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in ('torch', 'zmq', 'pandas', 'sklearn', 'yaml', 'pydantic', 'tqdm', 'dp_accounting', 'vfl')))
" 2>/dev/null; then
  exit 0
fi
if ! $VPY -c "import torch" 2>/dev/null; then
  echo "setup: installing $TORCH_SPEC (a few minutes; TORCH_INDEX_URL picks the wheel index, e.g. the CPU-only one)"
  $VPY -m pip install --progress-bar on ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
else
  echo "setup: keeping installed torch $($VPY -c 'import torch; print(torch.__version__)')"
fi
# every other package at the versions of scripts/constraints.txt (reproducible installs; regenerate with
# `.venv/bin/python -m pip freeze --exclude-editable`, leaving torch and its own dependencies out)
echo "setup: installing the project and its pinned dependencies into .venv"
$VPY -m pip install -q -c scripts/constraints.txt -e ".[test]"
echo "$want" > "$stamp"
echo "setup: ready ($($VPY -c 'import torch, numpy, pandas, zmq; print("torch", torch.__version__, "numpy", numpy.__version__, "pandas", pandas.__version__, "pyzmq", zmq.__version__)'))"
