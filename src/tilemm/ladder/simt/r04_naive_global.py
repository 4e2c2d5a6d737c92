"""Rung 4, `naive-global`: `naive`, but the sum is kept in C itself, in global memory
(seed 002's "direct write"): every step reads and writes C, where `naive` keeps it in a
register. Seed 002 measured it at a third of `naive` on an A100 at n = 10240.

Constraints: any M, N, K, any strides; block BLOCK x BLOCK threads.
"""
from numba import cuda, uint32

from tilemm.ladder.record import Traffic
from tilemm.ladder.simt import launch
from tilemm.ladder.simt.r03_naive import BLOCK, shape


# --8<-- [start:kernel]
def make_naive_global(acc):
    @cuda.jit(cache=True)
    def naive_global(a, b, c):
        m, n, k = uint32(c.shape[0]), uint32(c.shape[1]), uint32(a.shape[1])
        # --- exercise: begin
        row = uint32(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y)
        col = uint32(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x)
        if row < m and col < n:
            c[row, col] = acc(0)
            p = uint32(0)
            while p < k:
                c[row, col] = acc(c[row, col] + a[row, p] * b[p, col])  # a read and a write of C per step
                p = uint32(p + 1)
        # --- exercise: end
    return naive_global
# --8<-- [end:kernel]


def traffic(p, **_):
    # naive's loads, plus C read and written once per step.
    return Traffic(read=3.0 * p.m * p.n * p.k, written=p.m * p.n * (p.k + 1))


launch.register_simt("naive-global", 4, make_naive_global, shape, traffic, (BLOCK,), "seed 002",
                     "naive, accumulating straight into C in global memory")
