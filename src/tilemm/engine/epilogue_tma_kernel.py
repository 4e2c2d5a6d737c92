"""The fused epilogue on the persistent TMA schedule (launched by epilogue_launch.py): the engine's
persistent tile order (tilemm.engine.programs: tile_position, step_tiles, halves), rung 10's sum
of K steps on tensor cores, and epilogue_kernel.py's epilogue applied to the sums in registers,
a quarter of the tile's columns at a time, before the one store:

    Z = alpha * (A @ B) [+ beta * C] [+ bias]       (bias a row over N, or a column over M)
    Y = activation(Z) [+ residual]                  (relu, gelu (erf), gelu_tanh, silu)

One program an SM walks the tiles (PROGRAMS of them); the tile loop is flattened into the K loop,
so that the next tile's loads are in flight while this one's epilogue runs. A and B come in by
TMA (no address arithmetic, no masks: the copy engine fills zeros past M, N and K); C, bias,
residual, Y and AUX by pointers, any strides but Y's and AUX's contiguous rows.

Descriptors: made on the host (Triton's TensorDescriptor, eager launches) or, with
MAKE_DESCRIPTORS, in the program from A's and B's pointers (tl.make_tensor_descriptor: what a
compiled graph can hold, whose tracer does not take host descriptors; Triton then asks its
allocator for a little global scratch at each launch).

A sliver in the same launch (SLIVER_M, 0: none): the rows past the last multiple of SLIVER_PAST
(tile_model.sliver_rows' few rows, which whole tiles would spend a round of tiles on) are left
out of the tiles; before its tiles, each program takes its share of the sliver's thin
SLIVER_M x SLIVER_N tiles (the tile numbering continued, so the programs with fewer tiles take
them), read by pointers (sliver_a, sliver_b: A's and B's rows as the descriptors', any K,
B read once) and finished by the same epilogue: the pointer program's answer for those rows, in
one launch where a second would cost a compiled graph's CPU its launch. Or (SHORT_M) those rows
in tiles SHORT_M rows tall and as wide as the whole ones, by TMA and tensor cores, on the
programs the whole tiles leave a tile short: they take them while the others finish their last
whole tile (thin tiles on every program lengthen every program's walk); the same bits.

Constraints: float16 / bfloat16 operands (float32 sums); A and B each with rows, or columns,
contiguous and 16-byte aligned (A_T / B_T: the descriptor is of the transpose); K >= 1; tiles
powers of two of 16 or more, BLOCK_N a multiple of 64 (quarters of 16 or more).
"""
import triton
import triton.language as tl

from tilemm.engine.epilogue_kernel import finish, step_sum
from tilemm.engine.programs import halves, step_tiles, tile_position


# --8<-- [start:kernel]
@triton.jit
def matmul_epilogue_persistent(a_in, b_in, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, K,
                               stride_a, stride_b, stride_ym, stride_xm, stride_bias, stride_cm, stride_cn,
                               stride_rm, stride_rn, alpha, beta, sliver_a, sliver_b,
                               A_T: tl.constexpr, B_T: tl.constexpr, BIAS_OVER_M: tl.constexpr,
                               ACTIVATION: tl.constexpr, UPCAST: tl.constexpr, MAKE_DESCRIPTORS: tl.constexpr,
                               Y_ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr,
                               FLATTEN: tl.constexpr, SLIVER_M: tl.constexpr = 0, SLIVER_N: tl.constexpr = 16,
                               SLIVER_K: tl.constexpr = 256, SLIVER_PAST: tl.constexpr = 128,
                               SHORT_M: tl.constexpr = 0):
    """Y = activation(alpha * A @ B + beta * C + bias) + residual (and Z into AUX), PROGRAMS
    programs walking the BLOCK_M x BLOCK_N tiles. a_in / b_in: TMA descriptors of A (or A^T when
    A_T) and B (or B^T when B_T), or with MAKE_DESCRIPTORS those tensors' pointers, whose row
    strides are stride_a / stride_b. aux_ptr, bias_ptr, c_ptr, res_ptr: None where not given.
    Y_ALIGN: a power of two dividing N, stride_ym and stride_xm (Y's and AUX's rows stored that
    many elements at a time). UPCAST: Triton's interpreter (its bfloat16 tl.dot is wrong).
    SLIVER_M (a power of two of 16 or more, 0: no sliver): the tiles cover Y's rows up to the last
    multiple of SLIVER_PAST (a descriptor made here stops there), and the rows past it, no more
    than SLIVER_M, are summed in SLIVER_M x SLIVER_N tiles SLIVER_K of K a step from sliver_a and
    sliver_b (A's rows and B's rows; None without a sliver, and with MAKE_DESCRIPTORS, where a_in and
    b_in are those rows). SHORT_M (0: none; with SLIVER_M 0): those rows in SHORT_M x BLOCK_N
    tiles by TMA and tensor cores instead, on the programs the whole tiles leave a tile short
    (short_tiles); sliver_a is then their descriptor of A (or A^T), None with MAKE_DESCRIPTORS."""
    N = N // Y_ALIGN * Y_ALIGN                   # no-ops that say Y_ALIGN divides them
    stride_ym, stride_xm = stride_ym // Y_ALIGN * Y_ALIGN, stride_xm // Y_ALIGN * Y_ALIGN
    rows = M                                     # Y's rows
    if SLIVER_M > 0 or SHORT_M > 0:
        M = M - M % SLIVER_PAST                  # the whole tiles' rows
    if SLIVER_M > 0:
        # the sliver first: nothing of it is live through the tiles' loop, whose registers are
        # near full (195-255 a thread in 128 x 256 tiles; placed after that loop, it spills).
        # Its thin tiles continue the tiles' numbering: a program left a tile short takes one first.
        if MAKE_DESCRIPTORS:
            # a_in and b_in are then the rows' pointers themselves: a compiled graph given one
            # tensor as two arguments stores it twice (Inductor fixes each argument's layout by
            # a copy of its own where its producer is fused into it)
            sliver_a, sliver_b = a_in, b_in
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
        for thin in range((tl.program_id(0) + PROGRAMS - tiles % PROGRAMS) % PROGRAMS, tl.cdiv(N, SLIVER_N), PROGRAMS):
            acc = sliver_sums(sliver_a, sliver_b, M, thin * SLIVER_N, rows, N, K, stride_a, stride_b, A_T, B_T,
                              UPCAST, SLIVER_M, SLIVER_N, SLIVER_K)
            finish(acc, M, thin * SLIVER_N, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, rows, N, stride_ym, 1,
                   stride_xm, 1, stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta, BIAS_OVER_M,
                   ACTIVATION)
    if MAKE_DESCRIPTORS:                         # (rows, columns) of what each descriptor reads
        if A_T:
            a_desc = tl.make_tensor_descriptor(a_in, [K, M], [stride_a, 1], [BLOCK_K, BLOCK_M])
        else:
            a_desc = tl.make_tensor_descriptor(a_in, [M, K], [stride_a, 1], [BLOCK_M, BLOCK_K])
        if B_T:
            b_desc = tl.make_tensor_descriptor(b_in, [N, K], [stride_b, 1], [BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(b_in, [K, N], [stride_b, 1], [BLOCK_K, BLOCK_N])
        if SHORT_M > 0:
            if A_T:
                s_desc = tl.make_tensor_descriptor(a_in, [K, rows], [stride_a, 1], [BLOCK_K, SHORT_M])
            else:
                s_desc = tl.make_tensor_descriptor(a_in, [rows, K], [stride_a, 1], [SHORT_M, BLOCK_K])
    else:
        a_desc = a_in
        b_desc = b_in
        s_desc = sliver_a
    if SHORT_M > 0:
        # before the whole tiles, as the sliver (nothing of it live through their loop)
        short_tiles(s_desc, b_desc, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, rows, N, K, stride_ym, stride_xm,
                    stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta, A_T, B_T, BIAS_OVER_M,
                    ACTIVATION, UPCAST, SHORT_M, BLOCK_M, BLOCK_N, BLOCK_K, PROGRAMS)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    QUARTER: tl.constexpr = BLOCK_N // 4
    for tile in tl.range(tl.program_id(0), num_tiles, PROGRAMS, flatten=FLATTEN):
        off_m, off_n = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(0, k_steps):
            a, b = step_tiles(a_desc, b_desc, off_m, off_n, step * BLOCK_K, A_T, B_T)  # (BM, BK), (BK, BN)
            acc = step_sum(a, b, acc, UPCAST)        # tensor cores, float32 sums
        # the epilogue a quarter of the columns at a time: the next tile's stages still hold
        # shared memory, and each quarter's layout change gets a quarter of the space
        left, right = halves(acc)
        q0, q1 = halves(left)
        q2, q3 = halves(right)
        finish(q0, off_m, off_n, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, stride_ym, 1, stride_xm, 1,
               stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta, BIAS_OVER_M, ACTIVATION)
        finish(q1, off_m, off_n + QUARTER, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, stride_ym, 1, stride_xm, 1,
               stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta, BIAS_OVER_M, ACTIVATION)
        finish(q2, off_m, off_n + 2 * QUARTER, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, stride_ym, 1,
               stride_xm, 1, stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta, BIAS_OVER_M,
               ACTIVATION)
        finish(q3, off_m, off_n + 3 * QUARTER, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, stride_ym, 1,
               stride_xm, 1, stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta, BIAS_OVER_M,
               ACTIVATION)
# --8<-- [end:kernel]


@triton.jit
def short_tiles(s_desc, b_desc, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, rows, N, K, stride_ym, stride_xm,
                stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta, A_T: tl.constexpr,
                B_T: tl.constexpr, BIAS_OVER_M: tl.constexpr, ACTIVATION: tl.constexpr, UPCAST: tl.constexpr,
                SHORT_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                PROGRAMS: tl.constexpr):
    """Y's rows M to rows (fewer than SHORT_M) in SHORT_M x BLOCK_N tiles, by TMA (s_desc: A's
    rows, or A^T's, up to `rows`: zeros past them) and tensor cores, as the whole tiles' K loop
    (each element the same chain of sums). Taken by the programs the whole tiles leave a tile
    short, in turn (the launcher takes short tiles where those programs take two each at most: two
    of half a tile's rows, about one whole tile's time)."""
    first = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) % PROGRAMS     # the first program a tile short
    if tl.program_id(0) >= first:
        for short in range(tl.program_id(0) - first, tl.cdiv(N, BLOCK_N), PROGRAMS - first):
            off_n = short * BLOCK_N
            acc = tl.zeros((SHORT_M, BLOCK_N), dtype=tl.float32)
            for step in range(0, tl.cdiv(K, BLOCK_K)):
                a, b = step_tiles(s_desc, b_desc, M, off_n, step * BLOCK_K, A_T, B_T)
                acc = step_sum(a, b, acc, UPCAST)
            finish(acc, M, off_n, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, rows, N, stride_ym, 1, stride_xm, 1,
                   stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta, BIAS_OVER_M, ACTIVATION)


@triton.jit
def sliver_sums(a_ptr, b_ptr, off_m, off_n, M, N, K, stride_a, stride_b, A_T: tl.constexpr, B_T: tl.constexpr,
                UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """float32 sums of A[off_m:off_m + BLOCK_M] @ B[:, off_n:off_n + BLOCK_N] by pointer loads, as
    the pointer program's K loop: a_ptr A's rows (A^T's where A_T), b_ptr B's (B^T's where B_T),
    row strides stride_a / stride_b (16-byte aligned, as TMA's). Rows past M and columns past N
    wrap around to ones inside (never stored); whole K steps load with no mask (16-byte loads
    whatever K), and a last part step loads zeros past K. 64-bit offsets."""
    stride_a, stride_b = stride_a // 8 * 8, stride_b // 8 * 8      # no-ops that say 8 16-bit elements divide them
    offs_m = ((off_m + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    offs_n = ((off_n + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    if A_T:          # (BLOCK_M, BLOCK_K) of A: the columns of A^T's rows
        a_ptrs = a_ptr + offs_m[:, None] + offs_k[None, :].to(tl.int64) * stride_a
        a_step = BLOCK_K * stride_a
    else:
        a_ptrs = a_ptr + offs_m[:, None] * stride_a + offs_k[None, :]
        a_step = BLOCK_K
    if B_T:          # (BLOCK_K, BLOCK_N) of B: K-major, a Linear's weight
        b_ptrs = b_ptr + offs_k[:, None] + offs_n[None, :] * stride_b
        b_step = BLOCK_K
    else:
        b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_b + offs_n[None, :]
        b_step = BLOCK_K * stride_b
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, K // BLOCK_K):
        acc = step_sum(tl.load(a_ptrs), tl.load(b_ptrs), acc, UPCAST)
        a_ptrs += a_step
        b_ptrs += b_step
    k_left = K % BLOCK_K
    if k_left > 0:
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = step_sum(a, b, acc, UPCAST)
    return acc
