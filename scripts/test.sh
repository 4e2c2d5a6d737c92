#!/usr/bin/env bash
# The test suite, on any machine: numba-cuda kernels run in the CUDA simulator and Triton
# kernels in its interpreter (tests/conftest.py switches both on before any import).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
