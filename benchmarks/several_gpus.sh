#!/usr/bin/env bash
# The several-GPU benchmark in one command (at most 9 minutes): all the host's GPUs as
# ranks, then two ranks, then tilemm.spread.multi from one process. Records: OUT_DIR/several_gpus.jsonl.
#   bash benchmarks/several_gpus.sh benchmarks/results/h200
set -euo pipefail
out=${1:?usage: bash benchmarks/several_gpus.sh OUT_DIR}
python=${PYTHON:-python}
# NVLink multicast stays off in every child (it can take a shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
gpus=$($python -c 'import torch; print(torch.cuda.device_count())')
# each part under its own limit (together under 9 minutes); a part that fails does not stop the next.
# First a small run whose records are thrown away: a pipeline that hangs costs a minute, not four.
if timeout 60 $python -m torch.distributed.run --nproc-per-node "$gpus" benchmarks/several_gpus.py \
     --out "$(mktemp -d)" --sizes 4096 --rounds 1 > /dev/null; then
  timeout 210 $python -m torch.distributed.run --nproc-per-node "$gpus" benchmarks/several_gpus.py --out "$out" \
    --sizes 32768 65536 || echo "several_gpus: the $gpus-rank part failed ($?)"
  if [ "$gpus" -gt 2 ]; then
    timeout 120 $python -m torch.distributed.run --nproc-per-node 2 benchmarks/several_gpus.py --out "$out" \
      --sizes 32768 65536 || echo "several_gpus: the 2-rank part failed ($?)"
  fi
else
  echo "several_gpus: the small $gpus-rank run failed or hung ($?): the ranked parts are left out"
fi
timeout 120 $python benchmarks/several_gpus.py --one-process --out "$out" --sizes 32768 65536 \
  || echo "several_gpus: the one-process part failed ($?)"
