"""Launches of `tensorcore-f32` at 4096³ — 3xTF32 (the default), plain TF32, and precision="int8"
— and of cuBLAS SGEMM and TF32, for Nsight Compute: where does 3xTF32 spend its time?

    PYTHONPATH=src:benchmarks ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
        --section SchedulerStats -k regex:"tf32_matmul|int8_matmul|gemm|Kernel|sm90" -c 8 python3 benchmarks/profile_f32.py
"""
import torch

import tilemm

n = 4096
gen = torch.Generator(device="cuda").manual_seed(1)
a = torch.randn(n, n, device="cuda", generator=gen)
b = torch.randn(n, n, device="cuda", generator=gen)
want = a.double() @ b.double()
for precision in ("3xtf32", "tf32", "int8"):
    c = tilemm.matmul(a, b, kernel="tensorcore-f32", precision=precision)
    err = float((c.double() - want).abs().max() / want.abs().max())
    assert err < (2e-3 if precision == "tf32" else 2e-6), (precision, err)   # every profiled answer checked
    print(precision, "relative error", err)
torch.backends.cuda.matmul.allow_tf32 = False
sgemm = a @ b
torch.backends.cuda.matmul.allow_tf32 = True
tf32 = a @ b
torch.cuda.synchronize()
print("SGEMM relative error", float((sgemm.double() - want).abs().max() / want.abs().max()))
