"""Rung 6's kernel (`tiled`, the record in r06_tiled.py), built at the first launch: in a file of
its own so that importing tilemm or reading the ladder never imports numba-cuda."""
from numba import cuda, uint32

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
