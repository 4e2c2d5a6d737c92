"""Launches of the SIMT rung `regblock` (float32, 4096³) at its 8 x 8 and 16 x 8 thread tiles, and of
cuBLAS SGEMM, for Nsight Compute; the 16 x 8 kernel's machine code (SASS) written to --sass.

    PYTHONPATH=src:benchmarks ncu --section SpeedOfLight --section WarpStateStats --section InstructionStats \
        --section SchedulerStats -k regex:"regblock|gemm" -c 3 python3 benchmarks/profile_regblock.py --sass FILE
"""
import argparse

import torch

import tilemm
from tilemm.ladder.simt import launch

ap = argparse.ArgumentParser()
ap.add_argument("--sass")
args = ap.parse_args()
n = 4096
gen = torch.Generator(device="cuda").manual_seed(1)
a = torch.randn(n, n, device="cuda", generator=gen)
b = torch.randn(n, n, device="cuda", generator=gen)
want = a.double() @ b.double()
for tm, tn in ((8, 8), (16, 8)):
    c = tilemm.matmul(a, b, kernel="regblock", block_m=128, block_n=128, block_k=16, thread_m=tm, thread_n=tn)
    err = float((c.double() - want).abs().max() / want.abs().max())
    assert err < 1e-5, err                                   # every profiled answer checked
torch.backends.cuda.matmul.allow_tf32 = False
a @ b
torch.cuda.synchronize()
if args.sass:
    factory, _ = launch.FACTORIES["regblock"]
    kern = launch.compiled(factory, "float32", block_m=128, block_n=128, block_k=16, thread_m=16, thread_n=8)
    with open(args.sass, "w") as f:
        f.write("\n".join(kern.inspect_sass().values()))
