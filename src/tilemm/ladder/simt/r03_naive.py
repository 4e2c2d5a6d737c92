"""Rung 3, `naive`: one thread per output, the sum in a register (seeds 000-003).

    row = blockIdx.y * blockDim.y + threadIdx.y      # threadIdx.x walks the columns of C,
    col = blockIdx.x * blockDim.x + threadIdx.x      # so a warp reads 32 neighbours of a row of B

What the Python needs that the C doesn't: indices are uint32 and the K loop is a counter.
A signed index makes numba add a negative-index wraparound to every load, and a
`range` loop carries iterator bookkeeping; with both, the port ran at a quarter of its
CUDA C twin on an H100 (1.28 vs 5.28 TFLOP/s, fp32, 4096).

Constraints: any M, N, K, any strides; block BLOCK x BLOCK threads (BLOCK <= 32).
"""
from numba import cuda, uint32

from tilemm.ladder.record import Param, Traffic
from tilemm.ladder.simt import launch

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


def shape(p, block):
    return launch.LaunchShape((launch.ceil_div(p.n, block), launch.ceil_div(p.m, block)), (block, block), 0, (1, 1))


def naive_traffic(p, **_):
    # Every product loads one element of A and one of B from global memory (caches aside).
    return Traffic(read=2.0 * p.m * p.n * p.k, written=p.m * p.n)


BLOCK = Param("block", 16, (1, 2, 4, 8, 16, 32, 64), "threads per block side (BLOCK x BLOCK); 64 exceeds 1024")


launch.register_simt("naive", 3, make_naive, shape, naive_traffic, (BLOCK,), "seeds 000-003",
                     "one thread per output, the sum in a register")
