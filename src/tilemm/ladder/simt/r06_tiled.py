"""Rung 6, `tiled`: shared-memory tiles (seeds 000-004). Each block computes a TILE x TILE
tile of C; per phase, its threads copy a TILE x TILE tile of A and of B into shared memory
(one element each, coalesced), synchronise, and take TILE products from shared memory.
Each global element is loaded once per block instead of once per thread: TILE times fewer.

Unlike seed 003, any M, N, K: loads past an edge write zeros into the tile, and the
phase count is ceil(K / TILE), never derived from the grid.

Two forms of one algorithm: C-contiguous operands (the usual case) take the seed's own
flat indexing, A[row * K + k], with the two indices advanced by a tile each phase, and a block
wholly inside C skips the bounds tests until K's last, partial tile; any other strides take
2-D indexing. The flat form is not for show: at TILE 32 the JIT kept four constant-bank loads in
the 2-D form's loop, two in the flat one's, none once the interior tiles drop their bounds
tests, which is what brings the kernel level with its CUDA C twin.

The kernel is in r06_tiled_kernel.py, built (numba-cuda imported) at the first launch.

Constraints: TILE in {8, 16, 32} (64 would be 4096 threads a block: refused with the
reason); any M, N, K, any strides.
"""
from tilemm.ladder.record import Traffic
from tilemm.ladder.simt import launch


def shape(p, tile):
    return launch.LaunchShape((launch.ceil_div(p.n, tile), launch.ceil_div(p.m, tile)), (tile, tile),
                              2 * tile * tile * p.itemsize, (1, 1))


def traffic(p, tile):
    # Each block reads its (TILE, K) strip of A and (K, TILE) strip of B once: 2MNK / TILE.
    return Traffic(read=p.m * p.k * launch.ceil_div(p.n, tile) + p.k * p.n * launch.ceil_div(p.m, tile),
                   written=p.m * p.n)


KERNEL = "tilemm.ladder.simt.r06_tiled_kernel"
launch.register_simt("tiled", 6, launch.Factory(KERNEL, "make_tiled"), shape, traffic, (launch.TILE,), "seeds 000-004",
                     "shared-memory tiles of A and B, any M, N, K", compile_params=("tile",),
                     flat_factory=launch.Factory(KERNEL, "make_tiled_flat"))
