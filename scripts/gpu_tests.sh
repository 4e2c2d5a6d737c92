#!/usr/bin/env bash
# The GPU tier on a machine with CUDA GPUs and the packages installed (no set-up here): the whole
# suite with the simulator and the interpreter off (tests/conftest.py), the tests marked gpu
# included; then, where there are two GPUs or more, the tests marked multigpu. Extra arguments go
# to pytest (e.g. -n 16, or a file). Every failure is listed at the end (-rf); nothing stops early.
# The docs, notebooks, README and report files are the CPU tiers' (they build and run on any machine).
set -euo pipefail
cd "$(dirname "$0")/.."
export TILEMM_TEST_GPU=1 TRITON_DEFAULT_FP_FUSION=1 PYTHONPATH="src:.${PYTHONPATH:+:$PYTHONPATH}"
python=${PYTHON:-python3}
status=0
"$python" -m pytest -q -p no:cacheprovider -rf tests/ \
    --ignore=tests/test_docs.py --ignore=tests/test_notebooks.py --ignore=tests/test_readme.py \
    --ignore=tests/test_report.py --ignore=tests/test_report_honest.py --ignore=tests/test_report_kept.py \
    -m "not multigpu" "$@" || status=$?
gpus=$("$python" -c "import torch; print(torch.cuda.device_count())")
if [ "$gpus" -ge 2 ]; then
    "$python" -m pytest -q -p no:cacheprovider -rf tests/ -m multigpu "$@" || status=$?
fi
exit $status
