"""Rung 1, `cpu-naive`: the seeds' host triple loop (seed 000 ``matmul_cpu``, seed 003
``ord_matmul``), compiled with numba so it is not a Python-loop strawman.

Each output is one sum kept in a register; B is read down its columns, so every step of the
inner loop touches a new cache line of B. Rung 2 (`cpu-tiled`) fixes that.
"""
import numpy as np
from numba import njit

from tilemm.ladder.record import Kernel, Traffic, register

CPU_DTYPES = ("int32", "int64", "float32", "float64")


# --8<-- [start:kernel]
@njit(cache=True)
def _naive(a, b, c, zero):
    m, k = a.shape
    n = b.shape[1]
    # --- exercise: begin
    for i in range(m):
        for j in range(n):
            total = zero                    # the sum lives in a register
            for p in range(k):
                total += a[i, p] * b[p, j]  # b walks a column: a cache miss per step
            c[i, j] = total
    # --- exercise: end
# --8<-- [end:kernel]


def run_naive(a, b, c):
    _naive(a, b, c, np.zeros(1, c.dtype)[0])


register(Kernel(
    name="cpu-naive", rung=1, device="cpu", backend="numba", dtypes=CPU_DTYPES,
    seed="seeds 000, 003", summary="the host triple loop: one sum per output, B read down its columns",
    run=run_naive,
    # With no cache, every product loads one A and one B element.
    traffic=lambda p: Traffic(read=2 * p.m * p.n * p.k, written=p.m * p.n),
))
