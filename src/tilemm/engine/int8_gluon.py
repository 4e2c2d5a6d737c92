"""The int8 products of exact integer products on a Hopper GPU (tilemm.engine.digit_products: rung
`tensorcore-int` and tensorcore-f32's precision="int8") — int8 data, and the digit pairs of
wider integers — written in Gluon (Triton's lower-level dialect: shared
memory, barriers, tensor-core waits and warp roles spelled out).

Why not the Triton program every other 8- and 16-bit product uses: Triton's software pipeliner
lets a tensor-core product (wgmma) run on while the next one is issued only when its accumulator
is float32 ("Rule 2.1" of dotCanBeProperlyAsync in Triton 3.6 and 3.9). An int8 product sums in
int32, so each of its K steps ends in a wait for the tensor cores to drain: 1121-1187 TOPS at
8192³ where the same program reaches 1354-1417 on fp8. Here the waits are ours to place: a K
step's product is issued, then the multiplying warps wait only for the step before it, and
release that step's shared-memory stage.

Warp-specialized and persistent: one program an SM; one warp (the producer) walks this program's
(tile, K step) pairs issuing TMA loads into a ring of STAGES stages (gluon_helpers' producer), each stage guarded by a
`ready` barrier (the tiles are in) and an `empty` one (the product that read it is done); the
other warps (consumers, two warpgroups on one 128 x 256 tile) multiply and store C from their
registers at each tile's end while the producer already loads the next tile. Measured faster than
the same loop without the producer warp, whose stage refills put CTA-wide barriers in every K
step (under ncu most of the warps' stalls were at a barrier), and than the Triton digit program
for int32 and int64 results (figures: docs/tables/int_h100.md, docs/lessons.md).

Operands: the digit planes of A, stacked (ND_A * M, K), and of B^T, (ND_B * N, K), K-major
(Hopper's 8-bit wgmma reads no other layout; the rung writes them so, or uses int8 data as it is
when already K-major); C int64, int32, or narrower (int8: NumPy's wrap). Kept apart so that importing
tilemm never imports Triton; GPU only (Gluon has no interpreter).
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from tilemm.engine.launches import bound_launch
from tilemm.engine.gluon_helpers import block_pointers, invalidate_barriers, pair_count, producer, stage_ring, tile_start

# the wgmma N sizes an 8-bit integer product takes (no 256, unlike floating point)
INT8_INSTR_N = (224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 24, 16, 8)


@gluon.constexpr_function
def instr_n(block_m, block_n, num_warps):
    """The widest 8-bit wgmma N that divides a warp's share of BLOCK_N."""
    warps_along_n = max(1, num_warps // (block_m // 16))
    return next(n for n in INT8_INSTR_N if n <= max(block_n // warps_along_n, 8) and block_n % n == 0)


@gluon.constexpr_function
def warps_per_cta(block_m, num_warps):
    """Warps stacked along M (16 rows each), the rest along N."""
    along_m = min(num_warps, block_m // 16)
    return [along_m, num_warps // along_m]


@gluon.jit
def tile_offsets(tile, M, N, layout: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 GROUP_M: gl.constexpr):
    """(rows, columns) of C in tile number `tile`, in slices of the accumulator's register layout."""
    off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    return offs_m, offs_n


@gluon.jit
def tile_pointers(c_ptr, tile, M, N, stride_cm, stride_cn, layout: gl.constexpr, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """(pointers, inside C) of tile number `tile` of C, in the accumulator's register layout."""
    offs_m, offs_n = tile_offsets(tile, M, N, layout, BLOCK_M, BLOCK_N, GROUP_M)
    return block_pointers(c_ptr, offs_m, offs_n, M, N, stride_cm, stride_cn)


@gluon.jit
def shift_steps(acc, c, first, k_steps, a_bufs, b_bufs, ready, empty, s: gl.constexpr, ND_A: gl.constexpr,
                ND_B: gl.constexpr, STAGES: gl.constexpr):
    """acc + the products of shift s's digit pairs, step by step: each issued as soon as its
    stage is ready, the stage of the step before released (if it is this tile's: c != first)
    once that product is done. Returns (acc, c), c counting this program's steps."""
    if pair_count(s, ND_A, ND_B) > 0:
        for t in range(pair_count(s, ND_A, ND_B) * k_steps):
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(slot), b_bufs.index(slot).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if c != first:
                mbarrier.arrive(empty.index((c + STAGES - 1) % STAGES), count=1)
            c += 1
    return acc, c


@gluon.jit
def consumers(a_bufs, b_bufs, ready, empty, c_ptr, row_ptr, col_ptr, M, N, K, stride_cm, stride_cn, ND_A: gl.constexpr,
              ND_B: gl.constexpr, ND_C: gl.constexpr, LOWEST: gl.constexpr, ACCUMULATE: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
              PROGRAMS: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """The multiplying warps. Between shifts the sum moves up a digit, acc * 2^8 (Horner, exact
    modulo 2^32), from the highest shift down; for int64 (ND_C = 8) that covers the shifts 4..7,
    and the shifts 0..3, whose sums must be exact (the rung cuts K so they cannot overflow), are
    each summed apart and added to an int64 total (those below LOWEST left out: tensorcore-f32's
    precision="int8" drops the two lowest). C stored at a tile's end (ACCUMULATE: added to
    what C holds, for a later K chunk), or, with row_ptr and col_ptr, the int64 total times
    row[i] * col[j] in float64, rounded once into float32 C (precision="int8" scaling back)."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0],
                                                     warps_per_cta=warps_per_cta(BLOCK_M, num_warps),
                                                     instr_shape=[16, instr_n(BLOCK_M, BLOCK_N, num_warps), 32])
    EXACT: gl.constexpr = 4 if ND_C == 8 else 0      # shifts below this need exact sums
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        first = c
        acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.int32, layout=layout)
        for s in gl.static_range(ND_C - 1, EXACT - 1, -1):
            if s != ND_C - 1:
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                acc = acc << 8
            acc, c = shift_steps(acc, c, first, k_steps, a_bufs, b_bufs, ready, empty, s, ND_A, ND_B, STAGES)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        if ND_C == 8:
            total = acc.to(gl.int64) << 32
            for s in gl.static_range(EXACT - 1, LOWEST - 1, -1):
                part = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.int32, layout=layout)
                part, c = shift_steps(part, c, first, k_steps, a_bufs, b_bufs, ready, empty, s, ND_A, ND_B, STAGES)
                part = warpgroup_mma_wait(num_outstanding=0, deps=(part, ))
                total += part.to(gl.int64) << (8 * s)
        else:
            total = acc
        mbarrier.arrive(empty.index((c + STAGES - 1) % STAGES), count=1)
        c_ptrs, inside = tile_pointers(c_ptr, tile, M, N, stride_cm, stride_cn, layout, BLOCK_M, BLOCK_N, GROUP_M)
        if row_ptr is not None:                  # float32 from fixed point: scaled back (exact), rounded once
            offs_m, offs_n = tile_offsets(tile, M, N, layout, BLOCK_M, BLOCK_N, GROUP_M)
            row = gl.load(row_ptr + offs_m, mask=offs_m < M, other=0.0)
            col = gl.load(col_ptr + offs_n, mask=offs_n < N, other=0.0)
            scaled = total.to(gl.float64) * gl.expand_dims(row, 1) * gl.expand_dims(col, 0)
            gl.store(c_ptrs, scaled.to(gl.float32), mask=inside)
        else:
            if ACCUMULATE:                       # a later K chunk (int64, long K)
                total += gl.load(c_ptrs, mask=inside, other=0).to(total.dtype)
            gl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=inside)


@gluon.jit
def int8_matmul_ws(a_desc, b_desc, c_ptr, row_ptr, col_ptr, M, N, K, stride_cm, stride_cn, ND_A: gl.constexpr,
                   ND_B: gl.constexpr,
                   ND_C: gl.constexpr, LOWEST: gl.constexpr, ACCUMULATE: gl.constexpr, GROUP_M: gl.constexpr, PROGRAMS: gl.constexpr,
                   STAGES: gl.constexpr, num_warps: gl.constexpr):
    """C (+)= A @ B modulo 2^(8 ND_C) from int8 digit planes: a_desc A's ND_A planes stacked
    (ND_A * M, K), b_desc B's transposed, (ND_B * N, K), both K-major (int8 data: one plane each,
    ND_C = 1); int32 sums, and an int64 total for int64 C, the shifts below LOWEST (0 but for
    tensorcore-f32's precision="int8") left out; row_ptr and col_ptr (None but for that
    precision): float32 C = the int64 total times row[i] * col[j]. A tile that runs past row M reads
    the next plane's rows, which only reach rows of C that are not stored; past K and the last
    plane TMA reads zeros. Launched with min(tiles, PROGRAMS) programs of num_warps multiplying
    warps and one loading warp."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = stage_ring(a_desc, b_desc, STAGES)
    # the default partition (num_warps warps) multiplies; one worker warp, 24 registers a thread, loads
    gl.warp_specialize([(consumers, (a_bufs, b_bufs, ready, empty, c_ptr, row_ptr, col_ptr, M, N, K, stride_cm,
                                     stride_cn, ND_A, ND_B,
                                     ND_C, LOWEST, ACCUMULATE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES,
                                     num_warps)),
                        (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, ND_A, ND_B, ND_C, LOWEST,
                                    BLOCK_M,
                                    BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES))],
                       [1], [24])
    invalidate_barriers(ready, empty, STAGES)


def launcher(a_desc, b_desc, c, m: int, n: int, k: int, programs: int, digits=(1, 1), group_m: int = 8,
             num_stages: int = 4, num_warps: int = 8, accumulate: bool = False, lowest_shift: int = 0,
             scales=(None, None)):
    """A launcher without arguments (a BoundLaunch) of int8_matmul_ws into c (M, N), int8 ... int64, from digits = (ND_A,
    ND_B) planes of A and B (K >= 1: the rung writes zeros itself for K = 0); accumulate: add to
    what c holds (a later K chunk); lowest_shift: leave out the shifts below it (int64 sums only);
    scales: float64 row and column factors that turn the int64 sums into float32 c (for
    tensorcore-f32's precision="int8", K in one chunk)."""
    grid = (min(programs, triton.cdiv(m, a_desc.block_shape[0]) * triton.cdiv(n, b_desc.block_shape[0])),)
    nd_c = 1 if digits == (1, 1) else c.element_size()   # one pair needs no shifts, whatever C's width
    if scales[0] is not None:
        nd_c = 8                                           # int64 sums, scaled into float32
    return bound_launch(int8_matmul_ws, grid, (a_desc, b_desc, c, *scales, m, n, k, c.stride(0), c.stride(1)),
                        dict(ND_A=digits[0], ND_B=digits[1], ND_C=nd_c, LOWEST=lowest_shift, ACCUMULATE=accumulate,
                             GROUP_M=group_m, PROGRAMS=grid[0], STAGES=num_stages, num_warps=num_warps))

