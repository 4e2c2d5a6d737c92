"""A launch of `tensorcore` (bf16, 8192³) and of cuBLAS's (torch) for Nsight Compute: where does
each spend its time, and how does cuBLAS launch (cluster size)?

    PYTHONPATH=src:benchmarks ncu --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section WarpStateStats -k regex:"matmul|gemm|nvjet|xmma" -c 2 \
        python3 benchmarks/profile_bf16.py
"""
import torch

import tilemm

n = 8192
gen = torch.Generator(device="cuda").manual_seed(1)
a = torch.randn(n, n, device="cuda", generator=gen).bfloat16()
b = torch.randn(n, n, device="cuda", generator=gen).bfloat16()
launch, result = tilemm.plan(a, b, kernel="tensorcore").prepare(poison=True)
launch()                                              # compiled; the first profiled launch
want = a @ b                                          # cuBLAS: the second
torch.cuda.synchronize()
err = float((result().float() - want.float()).abs().max() / want.float().abs().max())
assert err < 1e-2, err                                # both answers agree to bf16's rounding of C
print("relative difference", err)
