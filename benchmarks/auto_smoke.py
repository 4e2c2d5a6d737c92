"""kernel="auto" on the GPU: the first call times the fast rungs that can run the problem (answers
checked) and caches the winner; the second reads the cache. Prints both calls' wall time, the
answer's relative error against float64 and what tilemm.tuning recorded; then the wall time per
call of 300 calls in a row (one synchronization at the end) of kernel="auto", of each candidate
named, and of torch.matmul.

    PYTHONPATH=src:benchmarks python3 benchmarks/auto_smoke.py [n [kernel ...]]
"""
import sys
import time

import torch

import tilemm
from tilemm import tuning

from call_overhead import wall_us  # noqa: E402  (benchmarks/ on the path)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
named = sys.argv[2:]
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
ref = a.double() @ b.double()
for i in range(2):
    t = time.perf_counter()
    c = tilemm.matmul(a, b, kernel="auto")
    torch.cuda.synchronize()
    print(f"auto call {i}: {time.perf_counter() - t:.2f} s, relative error "
          f"{float((c.double() - ref).abs().max() / ref.abs().max()):.2e}, {dict(tuning.last)}")


print(f"{n}³ bf16, wall time per call of 300 in a row:")
for label, call in [("auto", lambda: tilemm.matmul(a, b, kernel="auto"))] + \
        [(name, lambda name=name: tilemm.matmul(a, b, kernel=name)) for name in named] + \
        [("torch.matmul", lambda: torch.matmul(a, b))]:
    print(f"  {label:14} {wall_us(call, 300):9.1f} us")
