"""Rung 3, `naive`: one thread per output, the sum in a register (seeds 000-003).

    row = blockIdx.y * blockDim.y + threadIdx.y      # threadIdx.x walks the columns of C,
    col = blockIdx.x * blockDim.x + threadIdx.x      # so a warp reads 32 neighbours of a row of B

What the Python needs that the C doesn't: indices are uint32 and the K loop is a counter.
A signed index makes numba add a negative-index wraparound to every load, and a
`range` loop carries iterator bookkeeping; with both, the port ran far behind its
CUDA C twin.

The kernel is in r03_naive_kernel.py, built (numba-cuda imported) at the first launch.

Constraints: any M, N, K, any strides; block BLOCK x BLOCK threads (BLOCK <= 32).
"""
from tilemm.ladder.record import Traffic
from tilemm.ladder.simt import launch



def shape(p, block):
    return launch.LaunchShape((launch.ceil_div(p.n, block), launch.ceil_div(p.m, block)), (block, block), 0, (1, 1))


def traffic(p, **_):
    # Every product loads one element of A and one of B from global memory (caches aside).
    return Traffic(read=2.0 * p.m * p.n * p.k, written=p.m * p.n)


launch.register_simt("naive", 3, launch.Factory("tilemm.ladder.simt.r03_naive_kernel", "make_naive"), shape, traffic,
                     (launch.BLOCK,), "seeds 000-003",
                     "one thread per output, the sum in a register")
