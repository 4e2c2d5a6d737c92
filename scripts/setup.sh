#!/usr/bin/env bash
# Set up .venv with tilemm and everything its tests, benchmarks and reports use.
# torch is pinned: an unpinned torch on a CPU-only machine pulls a CUDA build of several GB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q "torch==2.13.0" -e ".[cuda,triton,report,test]" 2>&1 \
    | grep -v "^WARNING: Location" || true
# NVVM and NVRTC let the tests compile the numba-cuda rungs to PTX for sm_90 on a machine with no GPU.
.venv/bin/python -m pip install -q "nvidia-nvvm>=13,<14" "nvidia-cuda-nvrtc>=13,<14" 2>&1 \
    | grep -v "^WARNING: Location" || true
# Headless Chromium (Debian's package) lets the tests open the HTML report as a person would.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
        || echo "setup: could not install chromium; the report test will say it was skipped"
fi
.venv/bin/python -c "import tilemm, numba, torch, triton; print('tilemm', tilemm.__version__, 'ready')"
