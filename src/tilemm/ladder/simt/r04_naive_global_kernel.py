"""Rung 4's kernel (`naive-global`, the record in r04_naive_global.py), built at the first launch: in a file of
its own so that importing tilemm or reading the ladder never imports numba-cuda."""
from numba import cuda, uint32


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
