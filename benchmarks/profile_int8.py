"""Launches of the int8 product of `tensorcore-int` at 8192³ (A row-major, B (N, K).T: no
transposition pass) and of torch._int_mm, for Nsight Compute: where does each spend its time?

    PYTHONPATH=src:benchmarks ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
        -k regex:"int8_matmul|Kernel" -c 2 python3 benchmarks/profile_int8.py
"""
import torch

import tilemm
from int_vs_baselines import operand  # noqa: E402  (random full-range operands)

n = 8192
a, b = operand(1, n, n, "int8", "n"), operand(2, n, n, "int8", "t")
launch, result = tilemm.plan(a, b, kernel="tensorcore-int", out_dtype="int32").prepare(poison=True)
launch()                                     # compiled; this launch is the one profiled first
want = torch._int_mm(a, b)
torch.cuda.synchronize()
assert torch.equal(torch.as_tensor(result()), want), "the int8 product is wrong"
