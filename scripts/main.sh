#!/usr/bin/env bash
# The main job: install what the report needs, then run the benchmark suites that fit this
# machine and write one report (tables, plots, index.html) under report/. On a GPU: the seeds'
# experiments and the ladder; on a CPU-only machine: the CPU rungs against NumPy.
# The report in report/ is replaced only when the run finishes: Ctrl-C leaves the last one whole.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "main: $*"; }
if [ ! -x .venv/bin/python ]; then
    say "creating the virtual environment .venv with $("$PY" --version 2>&1) ..."
    "$PY" -m venv .venv
fi
# Only what the report needs (scripts/setup.sh installs what the tests and docs need too).
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    EXTRAS="report,cuda,triton"     # the GPU rungs: numba-cuda, Triton and torch
else
    EXTRAS="report"                 # the CPU rungs and the plots: NumPy, Numba, rich, matplotlib
fi
say "installing tilemm (editable) with the extra(s) $EXTRAS ..."
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q -e ".[$EXTRAS]" 2>&1 | grep -v "^WARNING: Location" || true
REPORT=${REPORT:-report}
# Measured on a budget: a rung's larger sizes whose predicted call time passes --skip-over
# seconds are estimated from the sizes measured (marked so in the table and plots), not run.
# The full sweep: bash scripts/main.sh --skip-over 3600 (an hour a call at most).
if .venv/bin/python -c "import sys, tilemm.system.machine as m; sys.exit(0 if m.gpu() else 1)"; then
    SUITES=(seeds ladder)
else
    SUITES=(cpu)
fi
say "measuring the ${SUITES[*]} suite(s); the report goes to $REPORT/"
.venv/bin/tilemm bench --suite "${SUITES[@]}" --budget 0.3 --skip-over 2 --report "$REPORT" "$@"
echo "open $REPORT/index.html"
