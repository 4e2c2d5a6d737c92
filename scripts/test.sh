#!/usr/bin/env bash
# The test suite, on any machine: numba-cuda kernels run in the CUDA simulator and Triton
# kernels in its interpreter (tests/conftest.py switches both on before any import).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two worker processes (pytest-xdist): the suite takes 8 to 12 minutes on 2 cores.
# TILEMM_TEST_WORKERS=1 runs it in this process.
workers=${TILEMM_TEST_WORKERS:-2}
if [ "$workers" = 1 ]; then
    exec .venv/bin/python -m pytest -q "$@"
fi
exec .venv/bin/python -m pytest -q -n "$workers" "$@"
