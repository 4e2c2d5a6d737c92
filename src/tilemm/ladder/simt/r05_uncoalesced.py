"""Rung 5, `uncoalesced`: `naive` with the thread axes swapped, threadIdx.x walking the rows
of C (seed 000's question, seed 003's layout). The 32 threads of a warp now read one element
each from 32 different rows of A and write 32 different rows of C: 32 memory transactions
where `naive` needs one or two. The arithmetic is identical; only the addresses differ.

Constraints: any M, N, K, any strides; block BLOCK x BLOCK threads; N <= 65535 * BLOCK
(the grid's y axis now walks the columns).
"""
from numba import cuda, uint32

from tilemm.ladder.simt import launch
from tilemm.ladder.simt.r03_naive import BLOCK, naive_traffic


# --8<-- [start:kernel]
def make_uncoalesced(acc):
    @cuda.jit(cache=True)
    def uncoalesced(a, b, c):
        m, n, k = uint32(c.shape[0]), uint32(c.shape[1]), uint32(a.shape[1])
        # --- exercise: begin
        row = uint32(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x)  # x walks rows: strided
        col = uint32(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y)
        if row < m and col < n:
            total = acc(0)
            p = uint32(0)
            while p < k:
                total = acc(total + a[row, p] * b[p, col])
                p = uint32(p + 1)
            c[row, col] = total
        # --- exercise: end
    return uncoalesced
# --8<-- [end:kernel]


def shape(p, block):
    return launch.LaunchShape((launch.ceil_div(p.m, block), launch.ceil_div(p.n, block)), (block, block), 0, (1, 1))


launch.register_simt("uncoalesced", 5, make_uncoalesced, shape, naive_traffic, (BLOCK,), "seeds 000, 003",
                     "naive with threadIdx.x walking rows: the coalescing lesson")
