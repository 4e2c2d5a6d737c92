#!/usr/bin/env bash
# The main job: set up, then run the benchmark suite that fits this machine and write a
# report (tables, plots, index.html) under report/. On a GPU: the seeds' experiments and the
# ladder; on a CPU-only machine: the CPU rungs against NumPy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
REPORT=${REPORT:-report}
# Measured on a budget: a rung's larger sizes whose predicted call time passes --skip-over
# seconds are estimated from the sizes measured (marked so in the table and plots), not run.
# The full sweep: bash scripts/main.sh --skip-over 3600 (an hour a call at most).
if .venv/bin/python -c "import sys, tilemm.machine as m; sys.exit(0 if m.gpu() else 1)"; then
    .venv/bin/tilemm bench --suite seeds --budget 0.3 --skip-over 2 --report "$REPORT" "$@"
    .venv/bin/tilemm bench --suite ladder --budget 0.3 --skip-over 2 --report "$REPORT" "$@"
else
    .venv/bin/tilemm bench --suite cpu --budget 0.3 --skip-over 2 --report "$REPORT" "$@"
fi
echo "open $REPORT/index.html"
