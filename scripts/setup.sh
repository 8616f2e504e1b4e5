#!/usr/bin/env bash
# Idempotent setup: .venv in the repo with the project (editable) and its test extras.
# A torch that is already importable (in .venv, or in the base python3) is kept; otherwise
# TORCH_SPEC (default torch==2.13.0, the CPU build) is installed. Set TORCH_SPEC to override.
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
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && $VPY -c "import torch, zmq, pandas, sklearn, yaml, vfl" 2>/dev/null; then
  exit 0
fi
if ! $VPY -c "import torch" 2>/dev/null; then
  echo "setup: installing $TORCH_SPEC"
  $VPY -m pip install -q "$TORCH_SPEC"
else
  echo "setup: keeping installed torch $($VPY -c 'import torch; print(torch.__version__)')"
fi
$VPY -m pip install -q -e ".[test]"
echo "$want" > "$stamp"
echo "setup: ready ($($VPY -c 'import torch, numpy, pandas, zmq; print("torch", torch.__version__, "numpy", numpy.__version__, "pandas", pandas.__version__, "pyzmq", zmq.__version__)'))"
