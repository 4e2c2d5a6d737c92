"""The float64 program of rung `tensorcore-f64` on a Hopper GPU: DMMA m16n8k8, written in Gluon.

Triton's tl.dot and Gluon's mma_v2 issue float64 products as `mma.sync.m8n8k4`, a quarter of the
work an instruction of the m16n8k8 shape cuBLAS's DGEMM runs. Here one warp's part of the tile is
a 6-D tensor (m16 block i, n8 block j, half h, groupID g, threadID_in_group t, pair e) in a
BlockedLayout whose four consecutive registers are one mma's operands (lane = 4 g + t), and
`gl.inline_asm_elementwise(pack=4)` issues one `mma.sync.aligned.m16n8k8.row.col.f64` a group.

The operands are read so that every fragment is a shared-memory load of 16 bytes landing in the
registers, and the order, the mma takes: C' = X^T Y^T with
- X (K, M') stored M'-major (rows along M'): a0, a1 (mma rows g and g + 8) are rows 2g and
  2g + 1 of X's tile, side by side; a2, a3 the same one K row on. A 16-row block of 8 K rows is
  one 1024-byte TMA box with 128-byte swizzle, so the 8 lanes of a quarter-warp hit 8 banks apart;
- Y (N', K) stored K-major: b0, b1 (K slots t and t + 4) are K columns 2t and 2t + 1 of Y's row,
  side by side, each chunk of 8 K columns a box of 64-byte rows (no bank conflicts unswizzled).
The K slots t, t + 4 of the mma stand for K columns 2t, 2t + 1 in both operands alike. Read K-major
instead, A's fragment came in two loads whose halves had to be moved into place: 193 register moves
for 32 DMMA in the loop, and that version ran measurably behind this one against DGEMM
(this program's figure: docs/lessons.md).

Warp-specialized: one loading warp issues the TMA loads into a ring of STAGES stages, the
multiplying warps release a stage after a barrier among themselves and a proxy fence (released
by one thread's arrive without them, a stage was refilled while still being read: wrong
elements). One program a tile, GROUP_M block rows walked together.

C' is C (X = A^T, Y = B^T) or C^T (X = B, Y = A), any strides; K >= 1. Kept apart so that
importing tilemm never imports Triton; GPU only (Gluon has no interpreter).
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from tilemm.engine.launches import bound_launch
from tilemm.engine.gluon_helpers import invalidate_barriers, stage_barriers, tile_start, tma_load
from tilemm.engine.tile_model import DMMA_STAGES, DMMA_TILES

BLOCK_M, BLOCK_N, BLOCK_K = DMMA_TILES["block_m"], DMMA_TILES["block_n"], DMMA_TILES["block_k"]
WARPS_M, WARPS_N = 2, 4           # the 8 multiplying warps over the tile: 64 x 32 each
STAGES = DMMA_STAGES
GROUP_M = 8
REGISTERS = 168                   # a thread of the multiplying warps (the loading warp keeps 24)
# a barrier among the multiplying warps: gl.thread_barrier in Triton 3.6, gl.barrier in 3.9
partition_barrier = getattr(gl, "barrier", None) or gl.thread_barrier


@gluon.constexpr_function
def fragment_layout(mi, ni, wm, wn):
    """(i, j, h, g, t, e): registers e, h (one mma's four), then n blocks, m blocks; lane 4 g + t;
    warps over the blocks."""
    return gl.BlockedLayout([mi, ni, 2, 1, 1, 2], [1, 1, 1, 8, 4, 1], [wm, wn, 1, 1, 1, 1], [5, 2, 4, 3, 1, 0])


@gluon.constexpr_function
def axis_layout(layout, dim):
    """layout sliced down to its dimension dim."""
    for d in range(5, -1, -1):
        if d != dim:
            layout = gl.SliceLayout(d, layout)
    return layout


@gluon.jit
def axis_index(size: gl.constexpr, dim: gl.constexpr, layout: gl.constexpr):
    """0 .. size - 1 along dimension dim of the 6-D layout, broadcastable to it."""
    x = gl.arange(0, size, layout=axis_layout(layout, dim))
    for d in gl.static_range(6):
        if d != dim:
            x = gl.expand_dims(x, d)
    return x


# --8<-- [start:kernel]
@gluon.jit
def dmma(x, y, acc):
    """acc + one m16n8k8 product per register group: x's four are a0..a3, y's first two b0, b1,
    acc's four c0..c3."""
    return gl.inline_asm_elementwise(
        "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$12,$13,$14,$15};",
        "=d,=d,=d,=d,d,d,d,d,d,d,d,d,d,d,d,d", [x, y, acc], dtype=gl.float64, is_pure=True, pack=4)
# --8<-- [end:kernel]


@gluon.jit
def loader(x_desc, y_desc, x_bufs, y_bufs, ready, empty, off_m, off_n, K, BLOCK_M: gl.constexpr,
           BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    """Each K step's boxes into the next free stage: per chunk of 8 K rows, X's 16-row blocks and
    Y's (BLOCK_N, 8) box."""
    MB: gl.constexpr = BLOCK_M // 16
    CHUNKS: gl.constexpr = BLOCK_K // 8
    for step in range(gl.cdiv(K, BLOCK_K)):
        slot = step % STAGES
        mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, CHUNKS * (MB * x_desc.block_type.nbytes + y_desc.block_type.nbytes))
        for j in gl.static_range(CHUNKS):
            k0 = step * BLOCK_K + 8 * j
            for i in gl.static_range(MB):
                tma_load(x_desc, [k0, off_m + 16 * i], bar, x_bufs.index(slot * CHUNKS + j).slice(8 * i, 8))
            tma_load(y_desc, [off_n, k0], bar, y_bufs.index(slot * CHUNKS + j))


# --8<-- [start:multiplier]
@gluon.jit
def multiplier(x_bufs, y_bufs, ready, empty, c_ptr, off_m, off_n, M, N, K, stride_cm, stride_cn,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, WARPS_M: gl.constexpr,
               WARPS_N: gl.constexpr, STAGES: gl.constexpr):
    """The tile's sums in registers, a stage at a time; then C' where it lies inside."""
    MB: gl.constexpr = BLOCK_M // 16
    NB: gl.constexpr = BLOCK_N // 8
    CHUNKS: gl.constexpr = BLOCK_K // 8
    layout: gl.constexpr = fragment_layout(MB // WARPS_M, NB // WARPS_N, WARPS_M, WARPS_N)
    acc = gl.zeros([MB, NB, 2, 8, 4, 2], gl.float64, layout)
    for step in range(gl.cdiv(K, BLOCK_K)):
        slot = step % STAGES
        mbarrier.wait(ready.index(slot), (step // STAGES) & 1)
        for j in gl.static_range(CHUNKS):
            # X's chunk (MB blocks of 8 K rows, 16 rows of C'): value (i, 0, h, g, t, e) = X[k 2t + h][16 i + 2 g + e]
            x = x_bufs.index(slot * CHUNKS + j).reshape([MB, 1, 4, 2, 8, 2]).permute([0, 1, 3, 4, 2, 5])
            # Y's chunk (BLOCK_N, 8 K columns): value (0, j, h, g, t, e) = Y[8 j + g][k 2t + e]
            y = y_bufs.index(slot * CHUNKS + j).reshape([1, NB, 1, 8, 4, 2])
            acc = dmma(x.load(layout), y.load(layout), acc)
        partition_barrier()
        fence_async_shared()
        mbarrier.arrive(empty.index(slot), count=1)
    # c0, c1 are (mma row g, columns 2t, 2t + 1), c2, c3 row g + 8: rows 2g and 2g + 1 of X's block
    rows = off_m + 16 * axis_index(MB, 0, layout) + 2 * axis_index(8, 3, layout) + axis_index(2, 2, layout)
    cols = off_n + 8 * axis_index(NB, 1, layout) + 2 * axis_index(4, 4, layout) + axis_index(2, 5, layout)
    ptrs = c_ptr + rows.to(gl.int64) * stride_cm + cols.to(gl.int64) * stride_cn
    gl.store(ptrs, acc, mask=(rows < M) & (cols < N))
# --8<-- [end:multiplier]


@gluon.jit
def f64_dmma(x_desc, y_desc, c_ptr, M, N, K, stride_cm, stride_cn, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             BLOCK_K: gl.constexpr, WARPS_M: gl.constexpr, WARPS_N: gl.constexpr, GROUP_M: gl.constexpr,
             STAGES: gl.constexpr):
    """C' (M x N) = X^T Y^T, X (K, M) from x_desc in (8, 16) boxes, Y (N, K) from y_desc in
    (BLOCK_N, 8) boxes; one program a BLOCK_M x BLOCK_N tile."""
    CHUNKS: gl.constexpr = BLOCK_K // 8
    x_bufs = gl.allocate_shared_memory(gl.float64, [STAGES * CHUNKS, BLOCK_M // 2, 16], x_desc.layout)
    y_bufs = gl.allocate_shared_memory(gl.float64, [STAGES * CHUNKS, BLOCK_N, 8], y_desc.layout)
    ready, empty = stage_barriers(STAGES)
    off_m, off_n = tile_start(gl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    gl.warp_specialize([(multiplier, (x_bufs, y_bufs, ready, empty, c_ptr, off_m, off_n, M, N, K, stride_cm, stride_cn,
                                      BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M, WARPS_N, STAGES)),
                        (loader, (x_desc, y_desc, x_bufs, y_bufs, ready, empty, off_m, off_n, K, BLOCK_M, BLOCK_K,
                                  STAGES))],
                       [1], [24])
    invalidate_barriers(ready, empty, STAGES)


def descriptors(x, y):
    """Gluon TMA descriptors of x (K, M) and y (N, K), rows contiguous and 16-byte aligned."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    swizzled = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=64, rank=2)
    plain = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=64, rank=2)
    return (TensorDescriptor(x, list(x.shape), list(x.stride()), [8, 16], swizzled),
            TensorDescriptor(y, list(y.shape), list(y.stride()), [BLOCK_N, 8], plain))


def launcher(x, y, c, stride_cm: int, stride_cn: int):
    """A launcher without arguments (a BoundLaunch) of c' = x^T y^T into c (c' = c, or c^T by the
    strides given): x (K, M), y (N, K) float64, rows contiguous and 16-byte aligned; K >= 1."""
    k, m = x.shape
    n = y.shape[0]
    x_desc, y_desc = descriptors(x, y)
    grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
    return bound_launch(f64_dmma, grid, (x_desc, y_desc, c, m, n, k, stride_cm, stride_cn),
                        dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, WARPS_M=WARPS_M, WARPS_N=WARPS_N,
                             GROUP_M=GROUP_M, STAGES=STAGES, num_warps=WARPS_M * WARPS_N, maxnreg=REGISTERS))
