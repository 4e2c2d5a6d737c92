"""Rung 3's kernel (`naive`, the record in r03_naive.py), built at the first launch: in a file of
its own so that importing tilemm or reading the ladder never imports numba-cuda."""
from numba import cuda, uint32


# --8<-- [start:kernel]
def make_naive(acc):
    @cuda.jit(cache=True)
    def naive(a, b, c):
        m, n, k = uint32(c.shape[0]), uint32(c.shape[1]), uint32(a.shape[1])
        # --- exercise: begin
        row = uint32(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y)
        col = uint32(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x)
        if row < m and col < n:
            total = acc(0)
            p = uint32(0)
            while p < k:
                total = acc(total + a[row, p] * b[p, col])
                p = uint32(p + 1)
            c[row, col] = total
        # --- exercise: end
    return naive
# --8<-- [end:kernel]
