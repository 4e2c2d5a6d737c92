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
the 2-D form's loop (0.93x its CUDA C twin), two in the flat one's (0.95x), none once the
interior tiles drop their bounds tests (0.99-1.00x).

Constraints: TILE in {8, 16, 32} (64 would be 4096 threads a block: refused with the
reason); any M, N, K, any strides.
"""
from numba import cuda, uint32

from tilemm.ladder.record import Param, Traffic
from tilemm.ladder.simt import launch


# --8<-- [start:kernel]
def make_tiled(acc, tile):
    align = launch.SHARED_ALIGN

    @cuda.jit(**launch.jit_options(launch.register_cap(1024) if tile == 32 else None))
    def tiled(a, b, c):
        tile_a = cuda.shared.array((tile, tile), acc, alignment=align)  # one shared array a line: the
        tile_b = cuda.shared.array((tile, tile), acc, alignment=align)  # simulator names them by line
        m, n, k = uint32(c.shape[0]), uint32(c.shape[1]), uint32(a.shape[1])
        tx, ty = uint32(cuda.threadIdx.x), uint32(cuda.threadIdx.y)
        row = uint32(cuda.blockIdx.y * tile + ty)
        col = uint32(cuda.blockIdx.x * tile + tx)
        # --- exercise: begin
        total = acc(0)
        phase = uint32(0)
        while phase < k:                               # phase walks K in steps of TILE
            ka = uint32(phase + tx)
            if row < m and ka < k:
                tile_a[ty, tx] = a[row, ka]            # (TILE, TILE) of A: a warp reads a row segment
            else:
                tile_a[ty, tx] = acc(0)
            kb = uint32(phase + ty)
            if kb < k and col < n:
                tile_b[ty, tx] = b[kb, col]            # (TILE, TILE) of B
            else:
                tile_b[ty, tx] = acc(0)
            cuda.syncthreads()
            for j in range(tile):                      # TILE is a constant: fully unrolled
                total = acc(total + tile_a[ty, j] * tile_b[j, tx])
            cuda.syncthreads()
            phase = uint32(phase + tile)
        if row < m and col < n:
            c[row, col] = total
        # --- exercise: end
    return tiled
# --8<-- [end:kernel]


# --8<-- [start:flat]
def make_tiled_flat(acc, tile):
    """The same kernel on flat row-major arrays, indexed as the seed indexes them."""
    align = launch.SHARED_ALIGN

    @cuda.jit(**launch.jit_options(launch.register_cap(1024) if tile == 32 else None))
    def tiled_flat(a, b, c, m, n, k):
        tile_a = cuda.shared.array((tile, tile), acc, alignment=align)  # one shared array a line
        tile_b = cuda.shared.array((tile, tile), acc, alignment=align)
        m, n, k = uint32(m), uint32(n), uint32(k)
        tx, ty = uint32(cuda.threadIdx.x), uint32(cuda.threadIdx.y)
        row = uint32(cuda.blockIdx.y * tile + ty)
        col = uint32(cuda.blockIdx.x * tile + tx)
        total = acc(0)
        ia = uint32(row * k + tx)                                 # A[row][phase + tx]
        ib = uint32(ty * n + col)                                 # B[phase + ty][col]
        # a block wholly inside C needs no bounds tests until the last, partial tile of K
        inside = uint32((cuda.blockIdx.y + 1) * tile) <= m and uint32((cuda.blockIdx.x + 1) * tile) <= n
        phase = uint32(0)
        while phase < k:
            if inside and uint32(phase + tile) <= k:
                tile_a[ty, tx] = a[ia]
                tile_b[ty, tx] = b[ib]
            else:
                ka = uint32(phase + tx)
                tile_a[ty, tx] = a[ia] if row < m and ka < k else acc(0)
                kb = uint32(phase + ty)
                tile_b[ty, tx] = b[ib] if kb < k and col < n else acc(0)
            cuda.syncthreads()
            for j in range(tile):
                total = acc(total + tile_a[ty, j] * tile_b[j, tx])
            cuda.syncthreads()
            phase = uint32(phase + tile)
            ia = uint32(ia + tile)                                # one tile right in A
            ib = uint32(ib + tile * n)                            # one tile down in B
        if row < m and col < n:
            c[uint32(row * n + col)] = total
    return tiled_flat
# --8<-- [end:flat]


def shape(p, tile):
    return launch.LaunchShape((launch.ceil_div(p.n, tile), launch.ceil_div(p.m, tile)), (tile, tile),
                              2 * tile * tile * p.itemsize, (1, 1))


def traffic(p, tile):
    # Each block reads its (TILE, K) strip of A and (K, TILE) strip of B once: 2MNK / TILE.
    return Traffic(read=p.m * p.k * launch.ceil_div(p.n, tile) + p.k * p.n * launch.ceil_div(p.m, tile),
                   written=p.m * p.n)


TILE = Param("tile", 16, (8, 16, 32, 64), "TILE_WIDTH: a block is TILE x TILE threads and tiles")

launch.register_simt("tiled", 6, make_tiled, shape, traffic, (TILE,), "seeds 000-004",
                     "shared-memory tiles of A and B, any M, N, K", compile_params=("tile",),
                     flat_factory=make_tiled_flat)
