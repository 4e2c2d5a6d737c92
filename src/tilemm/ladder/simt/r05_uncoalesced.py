"""Rung 5, `uncoalesced`: `naive` with the thread axes swapped, threadIdx.x walking the rows
of C (seed 000's question, seed 003's layout). The 32 threads of a warp now read one element
each from 32 different rows of A and write 32 different rows of C: 32 memory transactions
where `naive` needs one or two. The arithmetic is identical; only the addresses differ.

The kernel is in r05_uncoalesced_kernel.py, built (numba-cuda imported) at the first launch.

Constraints: any M, N, K, any strides; block BLOCK x BLOCK threads; N <= 65535 * BLOCK
(the grid's y axis now walks the columns).
"""
from tilemm.ladder.record import Traffic
from tilemm.ladder.simt import launch


def shape(p, block):
    return launch.LaunchShape((launch.ceil_div(p.m, block), launch.ceil_div(p.n, block)), (block, block), 0, (1, 1))


def traffic(p, **_):
    # naive's count: every product loads one element of A and one of B (only the addresses differ).
    return Traffic(read=2.0 * p.m * p.n * p.k, written=p.m * p.n)


launch.register_simt("uncoalesced", 5, launch.Factory("tilemm.ladder.simt.r05_uncoalesced_kernel", "make_uncoalesced"),
                     shape, traffic, (launch.BLOCK,), "seeds 000, 003",
                     "naive with threadIdx.x walking rows: the coalescing lesson")
