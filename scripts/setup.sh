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
stamp=.venv/.vfl-setup-stamp
want=$(cat pyproject.toml scripts/constraints.txt | sha256sum | cut -d' ' -f1)
# the fast path finds the packages without importing them (importing torch and sklearn costs seconds, and every
# launch script passes here)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && $VPY -c "
import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in ('torch', 'zmq', 'pandas', 'sklearn', 'yaml', 'pydantic', 'tqdm', 'vfl')))
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
