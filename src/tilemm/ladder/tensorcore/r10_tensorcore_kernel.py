"""The Triton programs of rung `tensorcore` (see r10_tensorcore.py): the pointer program, the TMA
program, and the sum of a tile's K steps that the engine's persistent schedule
(tilemm.engine.programs.matmul_persistent) runs on each tile. Kept apart so that importing tilemm
never imports Triton: it loads on the first launch, after TRITON_INTERPRET is read."""
import triton
import triton.language as tl

from tilemm.engine.programs import hand_over, step_tiles, store_tile, tile_position


# --8<-- [start:kernel]
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  UPCAST: tl.constexpr, split_steps=None, ws_ptr=None, counts_ptr=None,
                  ALIGN: tl.constexpr = (1, 1, 1, 1, 1, 1, 1, 1, 1)):
    """C = A @ B, a program a tile, pointers and masks: any strides, any M, N, K. split_steps
    given: split K (see matmul_tma). ALIGN: a power of two dividing each of M, N, K, stride_am,
    stride_ak, stride_bk, stride_bn, stride_cm, stride_cn (load_alignment)."""
    # Triton knows an integer argument's divisibility only by 16: told that a row of 1000 or 20
    # elements divides by 8 or 4, it loads 16- or 8-byte vectors asynchronously instead of one
    # element at a time into registers (which spilled: 255 registers a thread, 64 x 128 tiles),
    # and stores C's rows in vectors too
    M, N, K = M // ALIGN[0] * ALIGN[0], N // ALIGN[1] * ALIGN[1], K // ALIGN[2] * ALIGN[2]
    stride_am, stride_ak = stride_am // ALIGN[3] * ALIGN[3], stride_ak // ALIGN[4] * ALIGN[4]
    stride_bk, stride_bn = stride_bk // ALIGN[5] * ALIGN[5], stride_bn // ALIGN[6] * ALIGN[6]
    stride_cm, stride_cn = stride_cm // ALIGN[7] * ALIGN[7], stride_cn // ALIGN[8] * ALIGN[8]
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    steps = tl.cdiv(K, BLOCK_K)
    first = 0
    if split_steps is not None:                           # split K: this program's run of K steps
        first = tl.program_id(1) * split_steps
        steps = tl.minimum(steps, first + split_steps)
    # 64-bit offsets: an operand of 2^31 elements or more is addressed right (once a tile: free)
    rows_a, cols_b = offs_m.to(tl.int64), offs_n.to(tl.int64)
    ks = (first * BLOCK_K + offs_k).to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + ks[None, :] * stride_ak   # (BLOCK_M, BLOCK_K)
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols_b[None, :] * stride_bn   # (BLOCK_K, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(first, steps):
        k_left = K - step * BLOCK_K                       # edges load zeros: any M, N, K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0)
        if UPCAST:  # only in Triton's interpreter, whose bfloat16 tl.dot returns garbage
            # (3.9): bfloat16 products are exact in float32, so this is the same sum
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)                       # tensor cores, float32 accumulators
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if split_steps is not None:
        hand_over(acc, c_ptr, ws_ptr, counts_ptr, off_m, off_n, M, N, stride_cm, stride_cn)
    else:
        c = acc.to(c_ptr.dtype.element_ty)                # one rounding, as NumPy's float16
        c_ptrs = c_ptr + rows_a[:, None] * stride_cm + cols_b[None, :] * stride_cn
        tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
# --8<-- [end:kernel]


@triton.jit
def matmul_tma(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn,
               A_T: tl.constexpr, B_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr, ACCUMULATE: tl.constexpr,
               split_steps=None, ws_ptr=None, counts_ptr=None, C_ALIGN: tl.constexpr = 1):
    """The same product with the tiles brought in by TMA (Hopper's bulk tensor copy): no address
    arithmetic, no masks (the copy engine fills zeros past M, N and K). a_desc describes A, or A^T
    when A_T (A stored column-major); b_desc B, or B^T when B_T. ACCUMULATE: C += A @ B.
    C_ALIGN: a power of two dividing N and stride_cm (c_alignment), so that C's rows are stored
    that many elements at a time.

    split_steps given (split K): the launch's second grid axis numbers runs of split_steps K steps,
    each a program of its own that sums its run of its tile's K steps and hands it over (hand_over)."""
    N, stride_cm = N // C_ALIGN * C_ALIGN, stride_cm // C_ALIGN * C_ALIGN    # no-ops that say C_ALIGN divides them
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    first = 0
    steps = tl.cdiv(K, BLOCK_K)
    if split_steps is not None:
        first = tl.program_id(1) * split_steps
        steps = tl.minimum(steps, first + split_steps)
    acc = tile_steps(a_desc, b_desc, off_m, off_n, first, steps, M, N, A_T, B_T, UPCAST, None, BLOCK_M, BLOCK_N,
                     BLOCK_K)
    if split_steps is not None:
        hand_over(acc, c_ptr, ws_ptr, counts_ptr, off_m, off_n, M, N, stride_cm, stride_cn)
    else:
        store_tile(c_ptr, acc, off_m, off_n, M, N, stride_cm, stride_cn, ACCUMULATE)


# --8<-- [start:steps]
@triton.jit
def tile_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, A_T: tl.constexpr, B_T: tl.constexpr,
               UPCAST: tl.constexpr, OPTION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """The float32 sum of K steps step_from..step_to - 1 of the tile at (off_m, off_n), 16-bit
    tiles brought in by TMA: matmul_tma's, and what the persistent
    schedule (tilemm.engine.programs.matmul_persistent) runs on each tile (OPTION: unused)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(step_from, step_to):
        k0 = step * BLOCK_K
        a, b = step_tiles(a_desc, b_desc, off_m, off_n, k0, A_T, B_T)
        if UPCAST:   # Triton's interpreter only: see matmul_kernel
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    return acc
# --8<-- [end:steps]
