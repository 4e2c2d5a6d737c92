"""kernel="auto" on the GPU: the first call times the fast rungs that can run the problem (answers
checked) and caches the winner; the second reads the cache. Prints both calls' wall time, the
answer's relative error against float64 and what tilemm.tuning recorded.

    PYTHONPATH=src python3 benchmarks/auto_smoke.py [n]
"""
import sys
import time

import torch

import tilemm
from tilemm import tuning

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
ref = a.double() @ b.double()
for i in range(2):
    t = time.perf_counter()
    c = tilemm.matmul(a, b, kernel="auto")
    torch.cuda.synchronize()
    print(f"auto call {i}: {time.perf_counter() - t:.2f} s, relative error "
          f"{float((c.double() - ref).abs().max() / ref.abs().max()):.2e}, {dict(tuning.last)}")
