"""Rung 7, `rect`: seed 001's rectangular tiles. Per phase a block loads one TILE x TILE
tile of A and F tiles of B side by side, and each thread computes F outputs, TILE columns
apart. Every A value read from shared memory now feeds F products, and A is read from
global memory F times less often than in `tiled`.

(Seed 001's own code indexes its second B tile as ds_mat2[ty * TILE + TILE + tx], which
overlaps the next row of the first tile; here the B tile is a (TILE, F * TILE) array.)

The kernel is in r07_rect_kernel.py, built (numba-cuda imported) at the first launch.

Constraints: TILE in {8, 16, 32}, F in {2, 4}; any M, N, K, any strides.
"""
from tilemm.ladder.record import Param, Traffic
from tilemm.ladder.simt import launch


def shape(p, tile, f):
    return launch.LaunchShape((launch.ceil_div(p.n, tile * f), launch.ceil_div(p.m, tile)), (tile, tile),
                              (tile * tile + tile * tile * f) * p.itemsize, (1, f))


def traffic(p, tile, f):
    # A strip read once per block column (F*TILE wide), B strip once per block row.
    return Traffic(read=p.m * p.k * launch.ceil_div(p.n, tile * f) + p.k * p.n * launch.ceil_div(p.m, tile),
                   written=p.m * p.n)


launch.register_simt("rect", 7, launch.Factory("tilemm.ladder.simt.r07_rect_kernel", "make_rect"), shape, traffic,
                     (launch.TILE, Param("f", 2, (2, 4), "B tiles per phase = outputs per thread")),
                     "seed 001", "one A tile, F B tiles per phase: F outputs per thread",
                     compile_params=("tile", "f"))
