"""Rung `tensorcore-block-scaled`'s program for Hopper with block scales, warp-specialized, in
Gluon (the rung and its Triton program: r16_block_scaled.py, r16_block_scaled_kernel.py).

DeepGEMM's plan: BLOCK_K is the scales' block (128), so each K step's products come out of the
tensor cores as a fresh float32 partial that is multiplied by its step's scales (a 1 x 128 block
of A: one a row; a 128 x 128 block of B: one a 128-column half of the tile) and added to the
float32 total on the CUDA cores. In the Triton program every warp of a tile waits for each step's
products before any adds them, and the tensor cores idle meanwhile. Here, as in the per-tensor
program (scaled_fp8_gluon_kernel.py), each 64-row warpgroup of a 128-row tile is a partition of its
own that waits only for its own products and scales and adds them while the other warpgroup's run;
one loading warp fills a ring of stages by TMA, walking the same persistent tile order (64-row
tiles, where 128-row ones would leave SMs idle: one multiplying warpgroup). A 16-bit
C leaves by TMA stores from a 64 x 128 block of shared memory a warpgroup (a half at a time), which
run on while the next tile's products start: where K is short, C's stores from registers would
keep the tensor cores idle for a large part of each tile.

BLOCK_N = 256: two halves of 128 columns, each a fresh 64 x 128 partial, one half in flight at a
time (a 64 x 256 total and two partials in flight would not fit a warpgroup's registers);
BLOCK_N = 128: one. A half's 128 columns lie in one 128-column block of B's scales (tiles start
at multiples of 128): its scale from B is one number a step. Issuing the next step's products
before adding this step's (one warpgroup keeping the tensor cores fed by itself) was tried: ptxas
then serializes every wgmma (its warning C7514), as it does when a partial in flight is copied.

The next step's scales are loaded while this step's products are made (A's: the 64 rows of the
warpgroup, two a thread; B's: one number a half). With two halves (BLOCK_N = 256) the partials are scaled
and added as a multiply and an add (enable_fp_fusion=False): fused into one instruction, ptxas
spilled registers there (fp_fusion: read in its sm_90 SASS, it adds the first half's partial
while the second half's products run, into a second 64 x 128 partial that does not fit); with
one, as one fused multiply-add. FMA_RIGHT fuses the second half's alone (its adding has no
products of the tile to overlap), which ptxas compiles without spills: not the default until
measured (benchmarks/block_scaled_probe.py).

Operands K-major (A (M, K), B^T (N, K)), 16-byte aligned rows; scale_a (M, ceil(K/128)) and
scale_b (ceil(K/128), ceil(N/128)) float32, any strides; C any strides, bfloat16, float16 or
float32. Kept apart so that importing tilemm never imports Triton; GPU only (Gluon has no
interpreter).
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from tilemm.engine import availability, operand_copies
from tilemm.engine.launches import CopyInto, Steps, bound_launch
from tilemm.engine.gluon_helpers import (descriptor, invalidate_barriers, producer, stage_ring, store_block, tile_start,
                                         tma_store)

BLOCK_K = 128                          # a K step: the scales' block
# registers a thread of the second multiplying warpgroup asks for (the loading warp gives up its
# own: 24): a 64 x 256 float32 total and a 64 x 128 partial
WORKER_REGISTERS = 232


def fp_fusion(block_n: int) -> bool:
    """Whether the program's scaling and adding of a partial may fuse into one instruction: with
    one half (block_n 128); with two, ptxas spilled registers of the fused form (read in its
    output for sm_90, Triton 3.6 and 3.9), so a multiply and an add."""
    return block_n == 128


@gluon.jit
def step_scales(sa_ptr, sa_rows, sb_ptr, t, nb, stride_sak, stride_sbk, stride_sbn):
    """Step t's scales: A's for this warpgroup's rows (sa_rows: their offsets, rows past M clamped
    to the last: their sums are never stored), B's for the tile's halves (blocks nb[0], nb[1])."""
    sa = gl.load(sa_ptr + (sa_rows + t * stride_sak))
    sb_row = sb_ptr + t * stride_sbk
    return sa, gl.load(sb_row + nb[0] * stride_sbn), gl.load(sb_row + nb[1] * stride_sbn)


@gluon.jit
def promoted(total, partial, sa, sb, FMA: gl.constexpr = False):
    """total + partial * (A's row scales x B's scale): a fused multiply-add an element, or a
    multiply and an add (fp_fusion); FMA: a fused multiply-add whatever fp_fusion says."""
    if FMA:
        return gl.fma(partial, gl.expand_dims(sa * sb, 1), total)
    return total + partial * gl.expand_dims(sa * sb, 1)


# --8<-- [start:kernel]
@gluon.jit
def warpgroup_sums(a_bufs, b_bufs, ready, empty, c_desc, c_ptr, sa_ptr, sb_ptr, M, N, K, stride_cm, stride_cn,
                   stride_sam, stride_sak, stride_sbk, stride_sbn, WG: gl.constexpr, TMA_STORE: gl.constexpr,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                   PROGRAMS: gl.constexpr, STAGES: gl.constexpr, FMA_RIGHT: gl.constexpr):
    """Warpgroup WG's 64 rows of each of this program's tiles: per K step, each half's products
    into a fresh partial, scaled by the step's scales and added to the float32 total; the stage
    released once every half has read it; C = total at the tile's end: with TMA_STORE a half at a
    time through shared memory by a TMA store that runs on while the next tile's products start,
    else from registers."""
    HALVES: gl.constexpr = BLOCK_N // 128
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 32])
    if TMA_STORE:
        c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    pid = gl.program_id(0)
    k_steps = gl.cdiv(K, BLOCK_K)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    c = 0
    for tile in range(pid, num_tiles, PROGRAMS):
        off_m, off_n = tile_start(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows = off_m + WG * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, layout))
        # 32-bit offsets (launch: a contiguous copy of scale_a where they would not fit)
        sa_rows = gl.minimum(rows, M - 1) * stride_sam
        # the halves' blocks of B's scales; one past N's last block (its B is zeros) reads the last
        nb = (off_n // 128, gl.minimum(off_n // 128 + 1, gl.cdiv(N, 128) - 1))
        left = gl.zeros((64, 128), dtype=gl.float32, layout=layout)
        right = gl.zeros((64, 128), dtype=gl.float32, layout=layout)
        step = gl.zeros((64, 128), dtype=gl.float32, layout=layout)
        sa, sb0, sb1 = step_scales(sa_ptr, sa_rows, sb_ptr, 0, nb, stride_sak, stride_sbk, stride_sbn)
        for t in range(k_steps):
            # the next step's scales, loaded while this step's products are made (the last step's
            # again at the last)
            nxt, nsb0, nsb1 = step_scales(sa_ptr, sa_rows, sb_ptr, gl.minimum(t + 1, k_steps - 1), nb, stride_sak,
                                          stride_sbk, stride_sbn)
            slot = c % STAGES
            mbarrier.wait(ready.index(slot), (c // STAGES) & 1)
            a = a_bufs.index(slot).slice(WG * 64, 64)
            b = b_bufs.index(slot)
            step = warpgroup_mma(a, b.slice(0, 128).permute((1, 0)), step, use_acc=False, is_async=True)
            step = warpgroup_mma_wait(num_outstanding=0, deps=(step, ))
            if HALVES == 1:
                mbarrier.arrive(empty.index(slot), count=1)
            left = promoted(left, step, sa, sb0)
            if HALVES == 2:
                step = warpgroup_mma(a, b.slice(128, 128).permute((1, 0)), step, use_acc=False, is_async=True)
                step = warpgroup_mma_wait(num_outstanding=0, deps=(step, ))
                mbarrier.arrive(empty.index(slot), count=1)
                right = promoted(right, step, sa, sb1, FMA_RIGHT)
            sa, sb0, sb1 = nxt, nsb0, nsb1
            c += 1
        if TMA_STORE:
            tma.store_wait(0)                   # the last store has read c_smem
            c_smem.store(left.to(c_desc.dtype))
            fence_async_shared()
            tma_store(c_desc, [off_m + WG * 64, off_n], c_smem)
            if HALVES == 2:
                tma.store_wait(0)
                c_smem.store(right.to(c_desc.dtype))
                fence_async_shared()
                tma_store(c_desc, [off_m + WG * 64, off_n + 128], c_smem)
        else:
            store_block(c_ptr, left, off_m + WG * 64, off_n, M, N, stride_cm, stride_cn, layout, 64, 128)
            if HALVES == 2:
                store_block(c_ptr, right, off_m + WG * 64, off_n + 128, M, N, stride_cm, stride_cn, layout, 64, 128)
    if TMA_STORE:
        tma.store_wait(0)
# --8<-- [end:kernel]


@gluon.jit
def block_scaled_ws(a_desc, b_desc, c_desc, c_ptr, sa_ptr, sb_ptr, M, N, K, stride_cm, stride_cn, stride_sam,
                    stride_sak, stride_sbk, stride_sbn, TMA_STORE: gl.constexpr, GROUP_M: gl.constexpr,
                    PROGRAMS: gl.constexpr, STAGES: gl.constexpr, WORKER_REGISTERS: gl.constexpr,
                    FMA_RIGHT: gl.constexpr = False):
    """C = sum over K blocks of (scale_a x scale_b) * (A @ B of the block), from fp8 a_desc (M, K;
    blocks of BLOCK_M = 128 or 64 rows) and b_desc (N, K), K-major, float32 sums; c_desc C's in
    64 x 128 blocks where TMA_STORE (else unread). The first multiplying warpgroup is the default
    partition (num_warps = 4), the second (BLOCK_M = 128) and the loading warp are workers.
    Launched with min(tiles, PROGRAMS) programs."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_bufs, b_bufs, ready, empty = stage_ring(a_desc, b_desc, STAGES, BLOCK_M // 64)
    if BLOCK_M == 128:
        gl.warp_specialize([(warpgroup_sums, (a_bufs, b_bufs, ready, empty, c_desc, c_ptr, sa_ptr, sb_ptr, M, N, K,
                                              stride_cm, stride_cn, stride_sam, stride_sak, stride_sbk, stride_sbn, 0,
                                              TMA_STORE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES, FMA_RIGHT)),
                            (warpgroup_sums, (a_bufs, b_bufs, ready, empty, c_desc, c_ptr, sa_ptr, sb_ptr, M, N, K,
                                              stride_cm, stride_cn, stride_sam, stride_sak, stride_sbk, stride_sbn, 1,
                                              TMA_STORE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES, FMA_RIGHT)),
                            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, 1, 1, 1, 0, BLOCK_M,
                                        BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES))],
                           [4, 1], [WORKER_REGISTERS, 24])
    else:               # 64-row tiles (products of a few rows: twice the tiles): one multiplying warpgroup
        gl.warp_specialize([(warpgroup_sums, (a_bufs, b_bufs, ready, empty, c_desc, c_ptr, sa_ptr, sb_ptr, M, N, K,
                                              stride_cm, stride_cn, stride_sam, stride_sak, stride_sbk, stride_sbn, 0,
                                              TMA_STORE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES, FMA_RIGHT)),
                            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, 1, 1, 1, 0, BLOCK_M,
                                        BLOCK_N, BLOCK_K, GROUP_M, PROGRAMS, STAGES))],
                           [1], [24])
    invalidate_barriers(ready, empty, STAGES)


def launcher(a_desc, b_desc, c_desc, c, scale_a, scale_b, m: int, n: int, k: int, programs: int, block_m: int,
             block_n: int, group_m: int, num_stages: int, fusion: bool | None = None, fma_right: bool = False):
    """A launcher without arguments (a BoundLaunch) of block_scaled_ws into c (M, N); K >= 1;
    a_desc in block_m x BLOCK_K blocks, b_desc in block_n x BLOCK_K ones (gluon_helpers.descriptor);
    c_desc C's in 64 x 128 blocks (c_descriptor), or None: C written from registers. fusion: the
    program's enable_fp_fusion (None: fp_fusion(block_n)); fma_right: the second half's partials
    added by a fused multiply-add whatever fusion says (fusion and fma_right other than their
    defaults: a probe's variants, benchmarks/block_scaled_probe.py)."""
    grid = (min(programs, triton.cdiv(m, block_m) * triton.cdiv(n, block_n)),)
    # without a descriptor of C the program takes A's in its place, unread
    return bound_launch(block_scaled_ws, grid,
                        (a_desc, b_desc, c_desc or a_desc, c, scale_a, scale_b, m, n, k, c.stride(0), c.stride(1),
                         scale_a.stride(0), scale_a.stride(1), scale_b.stride(0), scale_b.stride(1)),
                        dict(TMA_STORE=c_desc is not None, GROUP_M=group_m, PROGRAMS=grid[0], STAGES=num_stages,
                             WORKER_REGISTERS=WORKER_REGISTERS, FMA_RIGHT=fma_right, num_warps=4,
                             enable_fp_fusion=fp_fusion(block_n) if fusion is None else fusion))


def c_descriptor(c):
    """A Gluon TMA descriptor of C in 64 x 128 blocks (a warpgroup's half), or None where TMA can't
    write C (not 16-bit, rows not contiguous, row stride or base not 16-byte aligned): then C is
    written from registers."""
    import torch
    element = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}.get(c.dtype)
    if element is None or not operand_copies.k_major(c):
        return None
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    layout = gl.NVMMASharedLayout.get_default_for([64, 128], element)
    return TensorDescriptor(c, list(c.shape), list(c.stride()), [64, 128], layout)


def launch(a, b, c, scale_a, scale_b, block_m: int, block_n: int, group_m: int, num_stages: int):
    """c = the block-scaled product of a (M, K) and b (K, N), float8 (the checks are
    tilemm.products.block_scaled's; K >= 1): A's and B^T's rows copied into 16-byte aligned rows
    where TMA needs it, then the program on min(tiles, SMs) programs. Returns the launch, a Steps
    that tilemm.engine.replay can run again on other operands."""
    m, k = a.shape
    n = b.shape[1]
    sa_fill = None
    if (m - 1) * scale_a.stride(0) + (scale_a.shape[1] - 1) * scale_a.stride(1) >= 2**31:
        # the program's offsets into scale_a are 32-bit: a contiguous copy
        contiguous = scale_a.new_empty(scale_a.shape)
        scale_a, sa_fill = contiguous, CopyInto(contiguous, scale_a)
    a_rows, a_fill = operand_copies.aligned_rows(a)
    b_rows, b_fill = operand_copies.aligned_rows(b.T)              # (N, K): B K-major
    product = launcher(descriptor(a_rows, block_m, BLOCK_K), descriptor(b_rows, block_n, BLOCK_K), c_descriptor(c),
                       c, scale_a, scale_b, m, n, k, availability.multiprocessors(), block_m, block_n, group_m,
                       num_stages)
    steps = Steps([sa_fill, a_fill, b_fill, product])
    steps()
    return steps
