"""Rung 1's kernel (`cpu-naive`, the record in r01_cpu_naive.py): the host triple loop, compiled
with numba. In a file of its own, imported at the first launch, so that importing tilemm or reading
the ladder never imports numba."""
import numpy as np
from numba import njit


# --8<-- [start:kernel]
@njit(cache=True)
def naive(a, b, c, zero):
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
    naive(a, b, c, np.zeros(1, c.dtype)[0])
