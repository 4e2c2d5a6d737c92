"""Rung `tensorcore-grouped`'s program with its tiles brought in by TMA (Hopper's bulk copy engine),
for the MoE forward layouts whose operands both lie K-major: a (rows, K) row-major, or a stack
(G, M, K) of them, and b (G, K, N) given as the transpose of a contiguous (G, N, K), the way torch's
MoE layers hold their weights. Each operand is one 2-D descriptor of its stacked rows; a tile that
runs past its group reads the next group's rows (past the last, TMA reads zeros), which only
reach rows and columns of C that the masked store leaves alone. No masks and no address
arithmetic in the K loop: what the pointer program (r15_grouped_kernel.py) spends registers on.

Short tiles: a group's last block row, where SMALL_M rows or fewer are left, is computed in tiles
of SMALL_M rows (A's second descriptor) in its place among the group's tiles (the weights it
reads are still in L2 from the block rows beside it): a 20-row expert pays for a 32-row product,
not a 128-row one. Routings that send a few rows to many experts have many such rows."""
import triton
import triton.language as tl

from tilemm.ladder.tensorcore.r15_grouped_scales import block_scale_factors, scale_arguments

# the layouts it takes, numbered as r15_grouped_kernel's SPLIT (which imports this module)
BATCHED = tl.constexpr(0)
SPLIT_M = tl.constexpr(1)
COUNTED_M = tl.constexpr(4)
# the short tiles' rows where a call names none: on the H200's fit set (benchmarks/grouped_vs_torch.py
# --tune) 32 and 16 tie ahead of none and of 64 (64-row tiles ran slower than no short tiles at all)
SHORT_ROWS = 32


# --8<-- [start:kernel]
@triton.jit
def tile_product(a_desc, b_desc, c_g, sa_g, sb_g, a_row, b_row, row, col, rows_g, N, K,
                 stride_cm, stride_cn, stride_sam, stride_sak, stride_sbk, stride_sbn,
                 BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                 INTEGER: tl.constexpr, INPUT_PRECISION: tl.constexpr, SCALED: tl.constexpr):
    """One (BLOCK_SIZE_M, BLOCK_SIZE_N) tile of C_g: rows row.. of the group (A's rows a_row..),
    columns col.. (B's transposed rows b_row..); rows_g: the group's rows, for the store's mask."""
    if INTEGER:
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.int32)
    else:
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    offs_m = row + tl.arange(0, BLOCK_SIZE_M)
    offs_n = col + tl.arange(0, BLOCK_SIZE_N)
    for kk in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = a_desc.load([a_row, kk * BLOCK_SIZE_K])            # (BLOCK_SIZE_M, BLOCK_SIZE_K)
        b = b_desc.load([b_row, kk * BLOCK_SIZE_K])            # (BLOCK_SIZE_N, BLOCK_SIZE_K)
        if SCALED:
            accumulator += tl.dot(a, b.T) * block_scale_factors(
                sa_g, sb_g, offs_m, offs_n, rows_g, N, kk, stride_sam, stride_sak, stride_sbk, stride_sbn,
                BLOCK_SIZE_K)
        else:
            # (out_dtype named: Triton before 3.9 takes float32 sums unless told, int8's int32 too)
            accumulator = tl.dot(a, b.T, accumulator, input_precision=INPUT_PRECISION, out_dtype=accumulator.dtype)
    c = accumulator.to(c_g.dtype.element_ty)
    c_ptrs = c_g + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < rows_g) & (offs_n[None, :] < N))


@triton.jit
def grouped_tma_kernel(a_desc, a_short_desc, b_desc, c_ptr, offs_ptr, G, M, N, K, EXTENT, NUM_PROGRAMS,
                       stride_cg, stride_cm, stride_cn,
                       sa_ptr, sb_ptr, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbk, stride_sbn,
                       SPLIT: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                       BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, SMALL_M: tl.constexpr,
                       INTEGER: tl.constexpr, INPUT_PRECISION: tl.constexpr, SCALED: tl.constexpr):
    """C_g = A_g @ B_g for every group (SPLIT_M, BATCHED or COUNTED_M), tiles walked as the pointer
    program walks them. a_desc, a_short_desc: A's rows (total_M or G * M, K) in tiles of
    BLOCK_SIZE_M and SMALL_M rows; b_desc: B's transposed rows (G * N, K)."""
    tile = tl.program_id(axis=0)
    tiles_before = 0
    lo = 0
    for g in range(0, G):
        m_g = M
        row0 = g * M                       # group g's first row in A's descriptor
        c_g = c_ptr + tl.cast(g, tl.int64) * stride_cg
        sa_g = sa_ptr + tl.cast(g, tl.int64) * stride_sag
        sb_g = sb_ptr + tl.cast(g, tl.int64) * stride_sbg
        hi = lo
        if SPLIT != BATCHED:
            hi = tl.minimum(tl.maximum(tl.load(offs_ptr + g), lo), EXTENT)
        if SPLIT == SPLIT_M:
            m_g = hi - lo
            row0 = lo
            c_g = c_ptr + tl.cast(lo, tl.int64) * stride_cm
            sa_g = sa_ptr + tl.cast(lo, tl.int64) * stride_sam
        if SPLIT == COUNTED_M:
            m_g = hi
            hi = 0
        num_pid_m = tl.cdiv(m_g, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_tiles = num_pid_m * num_pid_n
        left = m_g % BLOCK_SIZE_M          # rows of the last block row, where it is partial
        while tile >= tiles_before and tile < tiles_before + num_tiles:
            local = tile - tiles_before
            num_pid_in_group = GROUP_SIZE_M * num_pid_n
            first_pid_m = (local // num_pid_in_group) * GROUP_SIZE_M
            group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
            pid_m = first_pid_m + ((local % num_pid_in_group) % group_size_m)
            pid_n = (local % num_pid_in_group) // group_size_m
            a_row = row0 + pid_m * BLOCK_SIZE_M
            b_row = g * N + pid_n * BLOCK_SIZE_N
            tall = True
            if SMALL_M < BLOCK_SIZE_M:
                tall = (pid_m < num_pid_m - 1) | (left == 0) | (left > SMALL_M)
            if tall:
                tile_product(a_desc, b_desc, c_g, sa_g, sb_g, a_row, b_row, pid_m * BLOCK_SIZE_M,
                             pid_n * BLOCK_SIZE_N, m_g, N, K, stride_cm, stride_cn, stride_sam, stride_sak,
                             stride_sbk, stride_sbn, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, INTEGER,
                             INPUT_PRECISION, SCALED)
            else:
                tile_product(a_short_desc, b_desc, c_g, sa_g, sb_g, a_row, b_row, pid_m * BLOCK_SIZE_M,
                             pid_n * BLOCK_SIZE_N, m_g, N, K, stride_cm, stride_cn, stride_sam, stride_sak,
                             stride_sbk, stride_sbn, SMALL_M, BLOCK_SIZE_N, BLOCK_SIZE_K, INTEGER,
                             INPUT_PRECISION, SCALED)
            tile += NUM_PROGRAMS
        tiles_before += num_tiles
        lo = hi
# --8<-- [end:kernel]


def eligible(a, b, split: int) -> bool:
    """Whether both operands can be read through 2-D descriptors of their stacked rows: A's and B's
    transposed rows contiguous and packed (no gaps between groups), 16-byte aligned rows and bases,
    and rows to read in each (a descriptor has no empty dimension: no tokens, or no groups, take
    the pointer program)."""
    if split not in (SPLIT_M, BATCHED, COUNTED_M) or b.dim() != 3:
        return False
    g, k, n = b.shape
    packed_a = a.stride(-1) == 1 and (a.dim() == 2 or a.stride(0) == a.shape[1] * a.stride(1))
    packed_b = b.stride(1) == 1 and b.stride(2) == k and b.stride(0) == n * k
    row_bytes = (a.stride(-2) * a.element_size(), k * b.element_size())
    return (packed_a and packed_b and all(r % 16 == 0 for r in row_bytes)
            and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0 and a.numel() > 0 and b.numel() > 0)


def launch_arguments(a, b, c, offs, split: int, extent: int, programs: int, block_m: int, block_n: int,
                     block_k: int, group_m: int, num_warps: int, num_stages: int, small_m: int, scales=None) -> tuple:
    """(program, grid, args, options) of the program's launch on `programs` programs, for operands
    that eligible() takes (the checks are tilemm.products.grouped's). small_m: the short tiles'
    rows (block_m: none)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    g, k, n = b.shape
    a_rows = a.reshape(-1, k) if a.dim() == 3 else a                 # (rows, K): a view (packed)
    b_rows = b.transpose(1, 2).reshape(g * n, k)                     # (G * N, K): a view (packed)
    a_desc = TensorDescriptor.from_tensor(a_rows, [block_m, block_k])
    a_short_desc = TensorDescriptor.from_tensor(a_rows, [small_m, block_k])
    b_desc = TensorDescriptor.from_tensor(b_rows, [block_n, block_k])
    m = a.shape[1] if a.dim() == 3 else 0
    sc = c.stride() if c.dim() == 3 else (0,) + c.stride()
    return grouped_tma_kernel, (programs,), (
        a_desc, a_short_desc, b_desc, c, offs if offs is not None else c, g, m, n, k, extent, programs, *sc,
        *scale_arguments(scales, c, split == SPLIT_M)), dict(SCALED=scales is not None, SPLIT=split,
        BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k, GROUP_SIZE_M=group_m, SMALL_M=small_m,
        INTEGER=a.dtype.itemsize == 1 and not a.dtype.is_floating_point,
        INPUT_PRECISION="ieee" if a.dtype.itemsize == 4 else None, num_warps=num_warps, num_stages=num_stages)

