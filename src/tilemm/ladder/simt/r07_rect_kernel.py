"""Rung 7's kernel (`rect`, the record in r07_rect.py), built at the first launch: in a file of
its own so that importing tilemm or reading the ladder never imports numba-cuda."""
from numba import cuda, uint32

from tilemm.ladder.simt import launch


# --8<-- [start:kernel]
def make_rect(acc, tile, f):
    width = tile * f  # a Python int: shared array shapes must be compile-time constants
    align = launch.SHARED_ALIGN

    @cuda.jit(**launch.jit_options(launch.register_cap(1024) if tile == 32 else None))
    def rect(a, b, c):
        tile_a = cuda.shared.array((tile, tile), acc, alignment=align)   # (TILE, TILE) of A
        tile_b = cuda.shared.array((tile, width), acc, alignment=align)  # (TILE, F*TILE) of B: F tiles
        m, n, k = uint32(c.shape[0]), uint32(c.shape[1]), uint32(a.shape[1])
        tx, ty = uint32(cuda.threadIdx.x), uint32(cuda.threadIdx.y)
        row = uint32(cuda.blockIdx.y * tile + ty)
        col0 = uint32(cuda.blockIdx.x * (tile * f) + tx)   # this thread's columns: col0 + i*TILE
        total = cuda.local.array(f, acc)
        # --- exercise: begin
        for i in range(f):
            total[i] = acc(0)
        phase = uint32(0)
        while phase < k:
            ka = uint32(phase + tx)
            if row < m and ka < k:
                tile_a[ty, tx] = a[row, ka]
            else:
                tile_a[ty, tx] = acc(0)
            kb = uint32(phase + ty)
            for i in range(f):
                col = uint32(col0 + i * tile)
                if kb < k and col < n:
                    tile_b[ty, tx + i * tile] = b[kb, col]
                else:
                    tile_b[ty, tx + i * tile] = acc(0)
            cuda.syncthreads()
            for j in range(tile):
                a_val = tile_a[ty, j]                      # one shared read feeds F products
                for i in range(f):
                    total[i] = acc(total[i] + a_val * tile_b[j, tx + i * tile])
            cuda.syncthreads()
            phase = uint32(phase + tile)
        for i in range(f):
            col = uint32(col0 + i * tile)
            if row < m and col < n:
                c[row, col] = total[i]
        # --- exercise: end
    return rect
# --8<-- [end:kernel]
