"""Rung 4, `naive-global`: `naive`, but the sum is kept in C itself, in global memory
(seed 002's "direct write"): every step reads and writes C, where `naive` keeps it in a
register, so it is bound by C's traffic (seed 002's figures: docs/ladder/r04-naive-global.md).

The kernel is in r04_naive_global_kernel.py, built (numba-cuda imported) at the first launch.

Constraints: any M, N, K, any strides; block BLOCK x BLOCK threads.
"""
from tilemm.ladder.record import Traffic
from tilemm.ladder.simt import launch


def shape(p, block):
    return launch.LaunchShape((launch.ceil_div(p.n, block), launch.ceil_div(p.m, block)), (block, block), 0, (1, 1))


def traffic(p, **_):
    # naive's loads, plus C read and written once per step.
    return Traffic(read=3.0 * p.m * p.n * p.k, written=p.m * p.n * (p.k + 1))


launch.register_simt("naive-global", 4, launch.Factory("tilemm.ladder.simt.r04_naive_global_kernel", "make_naive_global"),
                     shape, traffic, (launch.BLOCK,), "seed 002",
                     "naive, accumulating straight into C in global memory")
