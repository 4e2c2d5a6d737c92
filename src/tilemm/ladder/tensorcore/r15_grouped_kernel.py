"""The Triton program of rung `tensorcore-grouped` and its launcher (see r15_grouped.py): Triton's
grouped-GEMM tutorial (08) made one program for every layout of torch._grouped_mm. Kept apart so
that importing tilemm never imports Triton: it loads on the first launch, after TRITON_INTERPRET
is read."""
import torch
import triton
import triton.language as tl

from tilemm.engine import jit_repeats, launches
from tilemm.system import compat
from tilemm.ladder.tensorcore import r15_grouped_tma_kernel
from tilemm.ladder.tensorcore.r15_grouped_scales import block_scale_factors, scale_arguments

# How the groups split the problem (the program's SPLIT): which dimension `offs` cuts, or none
# (tilemm.products.grouped_checks numbers them alike).
BATCHED = tl.constexpr(0)       # 3-D a x 3-D b: every group M x K x N, its own slice of a, b and c
SPLIT_M = tl.constexpr(1)       # 2-D a (tokens sorted by group) x 3-D b: group g's rows offs[g-1]:offs[g]
SPLIT_K = tl.constexpr(2)       # 2-D a x 2-D b, K cut by offs: c (G, M, N), the weight gradient
SPLIT_N = tl.constexpr(3)       # 3-D a x 2-D b, N cut by offs: group g's columns of b and c are offs[g-1]:offs[g]
COUNTED_M = tl.constexpr(4)     # 3-D a (G, capacity, K) x 3-D b: group g's first counts[g] rows (the masked layout)


# --8<-- [start:kernel]
@triton.jit
def grouped_kernel(a_ptr, b_ptr, c_ptr, offs_ptr, G, M, N, K, EXTENT, NUM_PROGRAMS,
                   stride_ag, stride_am, stride_ak, stride_bg, stride_bk, stride_bn,
                   stride_cg, stride_cm, stride_cn,
                   sa_ptr, sb_ptr, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbk, stride_sbn,
                   SPLIT: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                   BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, INTEGER: tl.constexpr,
                   INPUT_PRECISION: tl.constexpr, SCALED: tl.constexpr):
    """C_g = A_g @ B_g for every group g, in one launch of NUM_PROGRAMS programs: program p takes
    tiles p, p + NUM_PROGRAMS, p + 2 NUM_PROGRAMS... of the list of every group's tiles, walking
    the groups in order and working out each one's size from offs on the device (no host read:
    the launch is the same whatever the sizes, so a CUDA graph can hold it). M, N, K: the sizes
    every group shares; EXTENT: the length of the dimension offs cuts (offsets are clamped into
    it, so bad offsets read and write nothing outside the operands). SCALED: float8 groups with
    block scales (sa_ptr, sb_ptr; SPLIT_M, BATCHED or COUNTED_M), applied to each K step's sums."""
    tile = tl.program_id(axis=0)
    tiles_before = 0            # tiles of the groups walked so far
    lo = 0                      # where group g starts along the dimension offs cuts
    for g in range(0, G):
        # (1) this group's sizes and where its slices of A, B and C begin
        m_g = M
        n_g = N
        k_g = K
        a_g = a_ptr + tl.cast(g, tl.int64) * stride_ag
        b_g = b_ptr + tl.cast(g, tl.int64) * stride_bg
        c_g = c_ptr + tl.cast(g, tl.int64) * stride_cg
        sa_g = sa_ptr + tl.cast(g, tl.int64) * stride_sag
        sb_g = sb_ptr + tl.cast(g, tl.int64) * stride_sbg
        hi = lo
        if SPLIT != BATCHED:
            hi = tl.minimum(tl.maximum(tl.load(offs_ptr + g), lo), EXTENT)   # offs[g], clamped
        if SPLIT == SPLIT_M:
            m_g = hi - lo
            a_g += tl.cast(lo, tl.int64) * stride_am
            c_g += tl.cast(lo, tl.int64) * stride_cm
            sa_g += tl.cast(lo, tl.int64) * stride_sam
        if SPLIT == SPLIT_K:
            k_g = hi - lo
            a_g += tl.cast(lo, tl.int64) * stride_ak
            b_g += tl.cast(lo, tl.int64) * stride_bk
        if SPLIT == SPLIT_N:
            n_g = hi - lo
            b_g += tl.cast(lo, tl.int64) * stride_bn
            c_g += tl.cast(lo, tl.int64) * stride_cn
        if SPLIT == COUNTED_M:
            m_g = hi                # counts[g] rows, from row 0 of the group's slice
            hi = 0
        num_pid_m = tl.cdiv(m_g, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(n_g, BLOCK_SIZE_N)
        num_tiles = num_pid_m * num_pid_n

        # (2) this program's tiles of the group (an empty group has none)
        while tile >= tiles_before and tile < tiles_before + num_tiles:
            # tiles in groups of GROUP_SIZE_M block rows, as the matmul tutorial numbers them
            local = tile - tiles_before
            num_pid_in_group = GROUP_SIZE_M * num_pid_n
            first_pid_m = (local // num_pid_in_group) * GROUP_SIZE_M
            group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
            pid_m = first_pid_m + ((local % num_pid_in_group) % group_size_m)
            pid_n = (local % num_pid_in_group) // group_size_m

            # (BLOCK_SIZE_M, BLOCK_SIZE_K) tiles of A_g and (BLOCK_SIZE_K, BLOCK_SIZE_N) of B_g
            offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
            offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
            offs_k = tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_g + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
            b_ptrs = b_g + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn
            if INTEGER:
                accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.int32)   # exact sums
            else:
                accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for kk in range(0, tl.cdiv(k_g, BLOCK_SIZE_K)):
                k_left = k_g - kk * BLOCK_SIZE_K
                a = tl.load(a_ptrs, mask=(offs_m[:, None] < m_g) & (offs_k[None, :] < k_left), other=0.0)
                b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < n_g), other=0.0)
                if SCALED:
                    accumulator += tl.dot(a, b) * block_scale_factors(
                        sa_g, sb_g, offs_m, offs_n, m_g, n_g, kk, stride_sam, stride_sak, stride_sbk, stride_sbn,
                        BLOCK_SIZE_K)
                else:
                    # (out_dtype named: Triton before 3.9 takes float32 sums unless told, int8's int32 too)
                    accumulator = tl.dot(a, b, accumulator, input_precision=INPUT_PRECISION,
                                         out_dtype=accumulator.dtype)
                a_ptrs += BLOCK_SIZE_K * stride_ak
                b_ptrs += BLOCK_SIZE_K * stride_bk
            c = accumulator.to(c_ptr.dtype.element_ty)         # one rounding, to C's type

            c_ptrs = c_g + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
            tl.store(c_ptrs, c, mask=(offs_m[:, None] < m_g) & (offs_n[None, :] < n_g))
            tile += NUM_PROGRAMS
        tiles_before += num_tiles
        lo = hi
# --8<-- [end:kernel]


def launch(a, b, c, offs, split: int, extent: int, programs: int, block_m: int, block_n: int, block_k: int,
           group_m: int, num_warps: int, num_stages: int, tma=None, scales=None, small_m=None):
    """The program on `programs` programs (the checks are tilemm.products.grouped's). a, b, c: 2-D or 3-D
    torch tensors as SPLIT reads them (a group axis first where 3-D); offs: int32 (G,) on their
    device, or None (BATCHED); extent: the length of the dimension offs cuts. tma: the TMA program
    (r15_grouped_tma_kernel) where its eligible() takes the operands (None), always (True: a
    ValueError where it can't), or never (False). scales: None, or float8 a and b's block scales
    (scale_a (rows, K/128) or (G, M, K/128), scale_b (G, K/128, N/128), float32). small_m: the TMA
    program's short tiles, for a group's last rows (None: SHORT_ROWS, at most block_m)."""
    if compat.triton_interpreter() and torch.bfloat16 in (a.dtype, c.dtype):
        # Triton's interpreter multiplies bfloat16 wrongly (NumPy has none) and rounds float32 to
        # bfloat16 by truncation: there the same sums from float32 copies (a product of two
        # bfloat16 values is exact in float32) into float32, rounded once by torch; C's rows that
        # no group covers keep what they held
        use_tma = tma is not False and r15_grouped_tma_kernel.eligible(a, b, split)
        if tma and not use_tma:
            raise ValueError(TMA_REFUSED)
        wide = c if c.dtype == torch.float32 else c.float()
        up = a.dtype == torch.bfloat16
        launch(a.float() if up else a, b.float() if up else b, wide, offs, split, extent, programs, block_m, block_n,
               block_k, group_m, num_warps, num_stages, use_tma, scales, small_m)
        if wide is not c:
            c.copy_(wide)
        return
    jit_repeats.launch(*launch_arguments(a, b, c, offs, split, extent, programs, block_m, block_n, block_k, group_m,
                                         num_warps, num_stages, tma, scales, small_m))


def bound_launch(a, b, c, offs, split: int, extent: int, programs: int, block_m: int, block_n: int, block_k: int,
                 group_m: int, num_warps: int, num_stages: int, tma=None, scales=None, small_m=None):
    """launch()'s one launch as a launcher without arguments (tilemm.engine.launches.BoundLaunch),
    which tilemm.engine.replay can record and replay on other operands; None under Triton's
    interpreter with bfloat16 operands or result (there launch() computes from float32 copies)."""
    if compat.triton_interpreter() and torch.bfloat16 in (a.dtype, c.dtype):
        return None
    return launches.bound_launch(*launch_arguments(a, b, c, offs, split, extent, programs, block_m, block_n, block_k,
                                                   group_m, num_warps, num_stages, tma, scales, small_m))


TMA_REFUSED = ("tensorcore-grouped: tma=True takes the MoE forward layouts with both operands K-major (a row-major, "
               "b the transpose of a contiguous (G, N, K)), rows 16-byte aligned")


def launch_arguments(a, b, c, offs, split: int, extent: int, programs: int, block_m: int, block_n: int, block_k: int,
                     group_m: int, num_warps: int, num_stages: int, tma=None, scales=None, small_m=None) -> tuple:
    """(program, grid, args, options) of launch()'s one launch: the TMA program's or the pointer
    program's (launch()'s arguments; a ValueError for tma=True where the TMA program can't read
    the operands)."""
    use_tma = tma is not False and r15_grouped_tma_kernel.eligible(a, b, split)
    if tma and not use_tma:
        raise ValueError(TMA_REFUSED)
    if use_tma:
        short = small_m or min(r15_grouped_tma_kernel.SHORT_ROWS, block_m)
        return r15_grouped_tma_kernel.launch_arguments(a, b, c, offs, split, extent, programs, block_m, block_n,
                                                       block_k, group_m, num_warps, num_stages, short, scales)
    g = a.shape[0] if a.dim() == 3 else (b.shape[0] if b.dim() == 3 else offs.shape[0])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if split == SPLIT_M:
        m = 0                                   # every group's own
    elif split == SPLIT_K:
        k = 0
    elif split == SPLIT_N:
        n = 0
    sa, sb, sc = (x.stride() if x.dim() == 3 else (0,) + x.stride() for x in (a, b, c))
    integer = a.dtype == torch.int8
    return grouped_kernel, (programs,), (
        a, b, c, offs if offs is not None else c, g, m, n, k, extent, programs, *sa, *sb, *sc,
        *scale_arguments(scales, c, split == SPLIT_M)), dict(SCALED=scales is not None, SPLIT=split,
        BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k, GROUP_SIZE_M=group_m,
        INTEGER=integer, INPUT_PRECISION="ieee" if a.dtype == torch.float32 else None,
        num_warps=num_warps, num_stages=num_stages)
