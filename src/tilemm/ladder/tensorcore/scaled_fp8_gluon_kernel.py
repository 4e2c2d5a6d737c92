"""The fp8 products of rung `tensorcore-fp8` with float32 sums on a Hopper GPU, written in Gluon.

Hopper adds fp8 products into its accumulator with fewer bits than float32 keeps, so each K step's
products go into a fresh accumulator that is then added to the float32 total (cuBLAS does the
same unless asked for fast accumulation). In the Triton program (the engine's
matmul_persistent with scaled_steps) every warp of the tile waits for each step's products before any adds them,
and the tensor cores idle meanwhile: the float32 sums cost it 22% of its fast-accumulation speed.

Here each 64-row warpgroup of a 128 x 256 tile is a partition of its own: it waits only for its
own products and adds them while the other warpgroup's keep the tensor cores busy, in two halves
of 128 columns (each a fresh 64 x 128 accumulator: a total of 64 x 256 and a half in flight fit a
warpgroup's registers, two halves in flight do not). One loading warp walks the program's (tile, K
step) pairs issuing TMA loads into a ring of stages (gluon_helpers' producer and stage_ring).
Faster than the rung's Triton program where K is deep, so the rung takes it from
scaled_fp8.WARP_SPECIALIZED_FROM_K on (it writes each tile's C before loading the next, which costs
where K is short); its figures against torch._scaled_mm: benchmarks/results/h200/fp8_vs_scaled_mm.jsonl
(benchmarks/results/INDEX.md).

Operands K-major (A (M, K), B^T (N, K)), 16-byte aligned rows; C any strides, bfloat16, float16 or
float32. Kept apart so that importing tilemm never imports Triton; GPU only (Gluon has no
interpreter).
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from tilemm.engine.launches import bound_launch
from tilemm.engine.gluon_helpers import invalidate_barriers, producer, stage_ring, store_block, tile_start

BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 128
STAGES = 4
GROUP_M = 16
# registers a thread of the second multiplying warpgroup asks for (the loading warp gives up its
# own: 24), so that a 64 x 256 float32 total and a 64 x 128 product fit without spilling
WORKER_REGISTERS = 232


# --8<-- [start:kernel]
@gluon.jit
def warpgroup_sums(a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
                   WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                   GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr, ROW_SCALES: gl.constexpr):
    """Warpgroup WG's 64 rows of each of this program's tiles: per K step, each half's products
    into a fresh accumulator, waited for and added to the float32 total; the stage released once
    both halves have read it; C = total * scale_a * scale_b at the tile's end (ROW_SCALES: the
    rows' and columns' scales, see scaled_half)."""
    HALF: gl.constexpr = BLOCK_N // 2
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 32])
    if ROW_SCALES:
        scale = 1.0                                         # (unused: scaled_half loads the rows' and columns')
    else:
        scale = gl.load(scale_a_ptr) * gl.load(scale_b_ptr)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        left = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        right = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        step = gl.zeros((64, HALF), dtype=gl.float32, layout=layout)
        for t in range(k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            a = a_bufs.index(slot).slice(WG * 64, 64)
            b = b_bufs.index(slot)
            step = warpgroup_mma(a, b.slice(0, HALF).permute((1, 0)), step, use_acc=False, is_async=True)
            step = warpgroup_mma_wait(num_outstanding=0, deps=(step, ))
            left += step
            step = warpgroup_mma(a, b.slice(HALF, HALF).permute((1, 0)), step, use_acc=False, is_async=True)
            step = warpgroup_mma_wait(num_outstanding=0, deps=(step, ))
            mbarrier.arrive(empty.index(slot), count=1)
            right += step
            c += 1
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        row = off_m + WG * 64
        store_block(c_ptr, scaled_half(left, scale, scale_a_ptr, scale_b_ptr, row, off_n, M, N, layout, ROW_SCALES),
                    row, off_n, M, N, stride_cm, stride_cn, layout, 64, HALF)
        store_block(c_ptr, scaled_half(right, scale, scale_a_ptr, scale_b_ptr, row, off_n + HALF, M, N, layout,
                                       ROW_SCALES), row, off_n + HALF, M, N, stride_cm, stride_cn, layout, 64, HALF)


@gluon.jit
def scaled_half(x, scale, scale_a_ptr, scale_b_ptr, row, col, M, N, layout: gl.constexpr, ROW_SCALES: gl.constexpr):
    """x, the (64, HALF) block of C at (row, col), times the per-tensor scale, or, ROW_SCALES,
    times its rows' scales (scale_a, (M,)) and its columns' (scale_b, (N,)), unit strides, loaded
    here after the K loop (past M and N read as 0: never stored)."""
    if ROW_SCALES:
        rows = row + gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, layout))
        cols = col + gl.arange(0, x.shape[1], layout=gl.SliceLayout(0, layout))
        scale_a = gl.load(scale_a_ptr + rows, mask=rows < M, other=0.0)
        scale_b = gl.load(scale_b_ptr + cols, mask=cols < N, other=0.0)
        return x * (gl.expand_dims(scale_a, 1) * gl.expand_dims(scale_b, 0))
    return x * scale
# --8<-- [end:kernel]


@gluon.jit
def fp8_matmul_ws(a_desc, b_desc, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
                  GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr, STAGES: gl.constexpr, WORKER_REGISTERS: gl.constexpr,
                  ROW_SCALES: gl.constexpr = False):
    """C = scale_a * scale_b * A @ B from fp8 a_desc (M, K) and b_desc (N, K), K-major, float32
    sums (scales one number each, or with ROW_SCALES (M,) and (N,)): the first multiplying
    warpgroup is the default partition (num_warps = 4), the second and the loading warp are workers. Launched with min(tiles, PROGRAMS) programs."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = stage_ring(a_desc, b_desc, STAGES, BLOCK_M // 64)
    gl.warp_specialize([(warpgroup_sums, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K,
                                          stride_cm, stride_cn, 0, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS,
                                          STAGES, ROW_SCALES)),
                        (warpgroup_sums, (a_bufs, b_bufs, ready, empty, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K,
                                          stride_cm, stride_cn, 1, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS,
                                          STAGES, ROW_SCALES)),
                        (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, 1, 1, 1, 0, BLOCK_M,
                                    BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES))],
                       [4, 1], [WORKER_REGISTERS, 24])
    invalidate_barriers(ready, empty, STAGES)


def launcher(a_desc, b_desc, c, scale_a, scale_b, m: int, n: int, k: int, programs: int, row_scales: bool = False):
    """A launcher without arguments (a BoundLaunch) of fp8_matmul_ws into c (M, N); K >= 1;
    row_scales: scale_a (M,) and scale_b (N,), unit strides, instead of one number each."""
    grid = (min(programs, triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N)),)
    return bound_launch(fp8_matmul_ws, grid, (a_desc, b_desc, c, scale_a, scale_b, m, n, k, c.stride(0), c.stride(1)),
                        dict(GROUP_M=GROUP_M, PROGRAMS=grid[0], STAGES=STAGES, WORKER_REGISTERS=WORKER_REGISTERS,
                             ROW_SCALES=row_scales, num_warps=4))
