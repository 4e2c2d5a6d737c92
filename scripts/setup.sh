#!/usr/bin/env bash
# Set up .venv with tilemm and everything its tests, benchmarks, reports and docs use, saying
# what it installs as it goes (pip itself is kept quiet).
# torch is pinned: an unpinned torch on a CPU-only machine pulls a CUDA build of several GB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "setup: $*"; }
quiet_pip() { .venv/bin/python -m pip install -q "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
if [ ! -x .venv/bin/python ]; then
    say "creating the virtual environment .venv with $("$PY" --version 2>&1) ..."
    "$PY" -m venv .venv
fi
say "upgrading pip ..."
quiet_pip --upgrade pip
say "installing tilemm (editable) with its extras cuda, triton, report, test, docs, and torch 2.13.0;" \
    "on a fresh machine this takes a few minutes ..."
quiet_pip "torch==2.13.0" -e ".[cuda,triton,report,test,docs]"
# NVVM and NVRTC let the tests compile the numba-cuda rungs to PTX for sm_90 on a machine with no GPU.
say "installing NVVM and NVRTC 13 (the tests compile the GPU rungs to PTX without a GPU) ..."
quiet_pip "nvidia-nvvm>=13,<14" "nvidia-cuda-nvrtc>=13,<14"
# Headless Chromium (Debian's package) lets the tests open the HTML report as a person would.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    say "installing Chromium (Debian's package; the report test opens the page in it) ..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
        || say "could not install chromium; the report test will say it was skipped"
fi
.venv/bin/python -c "import tilemm, numba, torch, triton; print('setup: tilemm', tilemm.__version__, 'ready')"
