#!/usr/bin/env bash
# The main job: set up, then run the benchmark suites that fit this machine and write one
# report (tables, plots, index.html) under report/, replacing the one there. On a GPU: the
# seeds' experiments and the ladder; on a CPU-only machine: the CPU rungs against NumPy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
REPORT=${REPORT:-report}
# Measured on a budget: a rung's larger sizes whose predicted call time passes --skip-over
# seconds are estimated from the sizes measured (marked so in the table and plots), not run.
# The full sweep: bash scripts/main.sh --skip-over 3600 (an hour a call at most).
if .venv/bin/python -c "import sys, tilemm.machine as m; sys.exit(0 if m.gpu() else 1)"; then
    SUITES=(seeds ladder)
else
    SUITES=(cpu)
fi
echo "main: measuring the ${SUITES[*]} suite(s); the report goes to $REPORT/"
.venv/bin/tilemm bench --suite "${SUITES[@]}" --budget 0.3 --skip-over 2 --report "$REPORT" "$@"
echo "open $REPORT/index.html"
