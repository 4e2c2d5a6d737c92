"""Rung `tensorcore-grouped`'s program with its tiles brought in by TMA (Hopper's bulk copy engine),
for the MoE forward layouts whose operands both lie K-major: a (rows, K) row-major, or a stack
(G, M, K) of them, and b (G, K, N) given as the transpose of a contiguous (G, N, K), the way torch's
MoE layers hold their weights. Each operand is one 2-D descriptor of its stacked rows (A's twice:
tall tiles and short ones); a tile that runs past its group reads the next group's rows (past the
last, TMA reads zeros), which only reach rows and columns of C that the masked store leaves alone.
No masks and no address arithmetic in the K loop: what the pointer program (r15_grouped_kernel.py)
spends registers on. Its tiles are numbered by r15_grouped_schedule.py: every group's size read
once, tall tiles first, a group's last rows in a short tile where few are left."""
import triton
import triton.language as tl

from tilemm.ladder.tensorcore.r15_grouped_scales import block_scale_factors, scale_arguments
from tilemm.ladder.tensorcore.r15_grouped_schedule import find, group_rows, lane, short_rows, tile_table

# the layouts it takes, numbered as r15_grouped_kernel's SPLIT (which imports this module)
BATCHED = tl.constexpr(0)
SPLIT_M = tl.constexpr(1)
COUNTED_M = tl.constexpr(4)
MAX_GROUPS = 1024       # the scheduler holds every group's size in registers: up to this many


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
            accumulator = tl.dot(a, b.T, accumulator, input_precision=INPUT_PRECISION)
    c = accumulator.to(c_g.dtype.element_ty)
    c_ptrs = c_g + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < rows_g) & (offs_n[None, :] < N))


@triton.jit
def grouped_tma_kernel(a_desc, a_short_desc, b_desc, c_ptr, offs_ptr, G, M, N, K, EXTENT, NUM_PROGRAMS,
                       stride_cg, stride_cm, stride_cn,
                       sa_ptr, sb_ptr, stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbk, stride_sbn,
                       SPLIT: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                       BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, SMALL_M: tl.constexpr,
                       G_BLOCK: tl.constexpr, INTEGER: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                       SCALED: tl.constexpr):
    """C_g = A_g @ B_g for every group (SPLIT_M, BATCHED or COUNTED_M). a_desc, a_short_desc: A's
    rows (total_M or G * M, K) in tiles of BLOCK_SIZE_M and SMALL_M rows; b_desc: B's transposed
    rows (G * N, K). Program p takes tiles p, p + NUM_PROGRAMS... of the scheduler's list."""
    rows, first = group_rows(offs_ptr, G, M, EXTENT, SPLIT, G_BLOCK)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    tall_ends, short_ends = tile_table(rows, num_pid_n, BLOCK_SIZE_M, SMALL_M)
    tall_tiles = tl.max(tall_ends, 0)
    for tile in range(tl.program_id(axis=0), tall_tiles + tl.max(short_ends, 0), NUM_PROGRAMS):
        is_tall = tile < tall_tiles
        g, local = find(tl.where(is_tall, tall_ends, short_ends), tl.where(is_tall, tile, tile - tall_tiles))
        rows_g = lane(rows, g, G_BLOCK)
        first_g = lane(first, g, G_BLOCK)          # the group's first row in A's descriptor
        c_g = c_ptr + tl.cast(g, tl.int64) * stride_cg
        sa_g = sa_ptr + tl.cast(g, tl.int64) * stride_sag
        sb_g = sb_ptr + tl.cast(g, tl.int64) * stride_sbg
        if SPLIT == SPLIT_M:                       # C's and A's scales' rows are A's
            c_g = c_ptr + tl.cast(first_g, tl.int64) * stride_cm
            sa_g = sa_ptr + tl.cast(first_g, tl.int64) * stride_sam
        tall_rows = tl.cdiv(rows_g, BLOCK_SIZE_M) - short_rows(rows_g, BLOCK_SIZE_M, SMALL_M)
        if is_tall:
            # GROUP_SIZE_M block rows at a time, as the matmul tutorial numbers them (L2 reuse)
            num_pid_in_group = GROUP_SIZE_M * num_pid_n
            first_pid_m = (local // num_pid_in_group) * GROUP_SIZE_M
            group_size_m = tl.minimum(tall_rows - first_pid_m, GROUP_SIZE_M)
            pid_m = first_pid_m + ((local % num_pid_in_group) % group_size_m)
            pid_n = (local % num_pid_in_group) // group_size_m
            tile_product(a_desc, b_desc, c_g, sa_g, sb_g, first_g + pid_m * BLOCK_SIZE_M,
                         g * N + pid_n * BLOCK_SIZE_N, pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N, rows_g, N, K,
                         stride_cm, stride_cn, stride_sam, stride_sak, stride_sbk, stride_sbn,
                         BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, INTEGER, INPUT_PRECISION, SCALED)
        else:
            # the group's last rows, after its tall block rows; one tile a block column
            row = tall_rows * BLOCK_SIZE_M
            tile_product(a_short_desc, b_desc, c_g, sa_g, sb_g, first_g + row, g * N + local * BLOCK_SIZE_N,
                         row, local * BLOCK_SIZE_N, rows_g, N, K,
                         stride_cm, stride_cn, stride_sam, stride_sak, stride_sbk, stride_sbn,
                         SMALL_M, BLOCK_SIZE_N, BLOCK_SIZE_K, INTEGER, INPUT_PRECISION, SCALED)
# --8<-- [end:kernel]


def eligible(a, b, split: int) -> bool:
    """Whether both operands can be read through 2-D descriptors of their stacked rows: A's and B's
    transposed rows contiguous and packed (no gaps between groups), 16-byte aligned rows and bases;
    up to MAX_GROUPS groups."""
    if split not in (SPLIT_M, BATCHED, COUNTED_M) or b.dim() != 3 or b.shape[0] > MAX_GROUPS:
        return False
    g, k, n = b.shape
    packed_a = a.stride(-1) == 1 and (a.dim() == 2 or a.stride(0) == a.shape[1] * a.stride(1))
    packed_b = b.stride(1) == 1 and b.stride(2) == k and b.stride(0) == n * k
    row_bytes = (a.stride(-2) * a.element_size(), k * b.element_size())
    return (packed_a and packed_b and all(r % 16 == 0 for r in row_bytes)
            and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0 and k > 0)


def launch(a, b, c, offs, split: int, extent: int, programs: int, block_m: int, block_n: int, block_k: int,
           group_m: int, num_warps: int, num_stages: int, small_m: int, scales=None):
    """The program on `programs` programs, for operands that eligible() takes (the checks are
    tilemm.products.grouped's). small_m: the short tiles' rows (block_m: none)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    g, k, n = b.shape
    a_rows = a.reshape(-1, k) if a.dim() == 3 else a                 # (rows, K): a view (packed)
    b_rows = b.transpose(1, 2).reshape(g * n, k)                     # (G * N, K): a view (packed)
    a_desc = TensorDescriptor.from_tensor(a_rows, [block_m, block_k])
    a_short_desc = TensorDescriptor.from_tensor(a_rows, [small_m, block_k])
    b_desc = TensorDescriptor.from_tensor(b_rows, [block_n, block_k])
    m = a.shape[1] if a.dim() == 3 else 0
    sc = c.stride() if c.dim() == 3 else (0,) + c.stride()
    grouped_tma_kernel[(programs,)](
        a_desc, a_short_desc, b_desc, c, offs if offs is not None else c, g, m, n, k, extent, programs, *sc,
        *scale_arguments(scales, c, split == SPLIT_M), SCALED=scales is not None, SPLIT=split,
        BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k, GROUP_SIZE_M=group_m, SMALL_M=small_m,
        G_BLOCK=max(128, triton.next_power_of_2(g)), INTEGER=a.dtype.itemsize == 1 and not a.dtype.is_floating_point,
        INPUT_PRECISION="ieee" if a.dtype.itemsize == 4 else None, num_warps=num_warps, num_stages=num_stages)
