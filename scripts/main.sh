#!/usr/bin/env bash
# The main job: set up, then run the benchmark suite that fits this machine and write a
# report (tables, plots, index.html) under report/. On a GPU: the seeds' experiments and the
# ladder; on a CPU-only machine: the CPU rungs against NumPy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
REPORT=${REPORT:-report}
if .venv/bin/python -c "import sys, tilemm.machine as m; sys.exit(0 if m.gpu() else 1)"; then
    .venv/bin/tilemm bench --suite seeds --report "$REPORT" "$@"
    .venv/bin/tilemm bench --suite ladder --report "$REPORT" "$@"
else
    .venv/bin/tilemm bench --suite cpu --report "$REPORT" "$@"
fi
echo "open $REPORT/index.html"
