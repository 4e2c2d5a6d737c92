"""The Triton programs of rung `tensorcore-f32` (see r13_f32.py): the split of float32 operands
into TF32 parts, K-major, the product of the parts (tf32x3_steps, which the engine's persistent
schedule also runs on each tile), IEEE float32 on the FMA units for short sums and for the tiles
that meet Inf or NaN, and the scaling back of precision="int8"'s exact integer product (its
digits are split and multiplied by tensorcore-int's programs). Kept apart so that importing
tilemm never imports Triton."""
import triton
import triton.language as tl

from tilemm.engine.programs import store_tile, tile_position


@triton.jit(do_not_specialize=["down"])
def split_tf32(x_ptr, out_ptr, R, C, C_PAD, stride_outer, stride_inner, down,
               PARTS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """out[0] = x rounded to TF32 (10 mantissa bits, to nearest), out[1] = x - out[0] (exact in
    float32) when PARTS == 2; zeros for C <= c < C_PAD. out is contiguous (PARTS, R, C_PAD). x's
    (r, c) lies at r * stride_outer + c * stride_inner, or where down is set at c * stride_outer +
    r * stride_inner: its tile read down its columns and transposed in registers (B^T of a
    row-major B, written K-major). Either way the stride of 1 comes in one place, so A's split and
    B^T's are one program (Triton compiles a program for each argument equal to 1)."""
    offs_r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    offs_c = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    if down:
        x = tl.trans(tl.load(x_ptr + offs_c[:, None] * stride_outer + offs_r[None, :] * stride_inner,
                             mask=(offs_c[:, None] < C) & (offs_r[None, :] < R), other=0.0))
    else:
        x = tl.load(x_ptr + offs_r[:, None] * stride_outer + offs_c[None, :] * stride_inner,
                    mask=(offs_r[:, None] < R) & (offs_c[None, :] < C), other=0.0)
    out = out_ptr + offs_r[:, None] * C_PAD + offs_c[None, :]
    keep = (offs_r[:, None] < R) & (offs_c[None, :] < C_PAD)
    if PARTS == 2:
        hi, lo = tf32_parts(x)
        tl.store(out, hi, mask=keep)
        tl.store(out + tl.cast(R, tl.int64) * C_PAD, lo, mask=keep)   # 64-bit offset
    else:
        tl.store(out, x, mask=keep)


# --8<-- [start:parts]
@triton.jit
def tf32_parts(x):
    """(hi, lo): hi = x rounded to TF32 (10 mantissa bits, to nearest), lo = x - hi (exact in
    float32). Rounding on the 13 bits TF32 drops (-8192 = ~0x1FFF); values this rounding could
    carry to Inf are truncated instead; Inf and NaN stay whole in hi, with lo = 0."""
    bits = x.to(tl.int32, bitcast=True)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
    truncated = (bits & -8192).to(tl.float32, bitcast=True)
    hi = tl.where(finite, tl.where(tl.abs(x) < 3.0e38, rounded, truncated), x)
    return hi, tl.where(finite, x - hi, 0.0)
# --8<-- [end:parts]


# --8<-- [start:kernel]
@triton.jit
def tf32x3_direct(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    """C = A @ B by 3xTF32 in one launch, for small products (where the split passes' launches
    cost more than the product): each K step's tiles of A and B are loaded by pointers (any
    strides, masks at the edges) and split into their TF32 parts in registers; the sums go as in
    tf32x3_steps, a chunk of CHUNK steps at a time."""
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m.to(tl.int64)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n.to(tl.int64)[None, :] * stride_bn
    steps = tl.cdiv(K, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(0, steps, CHUNK):
        big = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(c0, tl.minimum(c0 + CHUNK, steps)):
            k_left = K - step * BLOCK_K
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
            a_hi, a_lo = tf32_parts(a)
            b_hi, b_lo = tf32_parts(b)
            small = tl.dot(a_lo, b_hi, small, input_precision="tf32")
            small = tl.dot(a_hi, b_lo, small, input_precision="tf32")
            big = tl.dot(a_hi, b_hi, big, input_precision="tf32")
        acc += big + tl.where(tl.abs(small) < float("inf"), small, 0.0)    # see tf32x3_steps
    store_tile(c_ptr, acc, off_m, off_n, M, N, stride_cm, stride_cn, False)
# --8<-- [end:kernel]


# --8<-- [start:steps]
@triton.jit
def tf32x3_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, A_T: tl.constexpr, B_T: tl.constexpr,
                 UPCAST: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    """The float32 sum of K steps step_from..step_to - 1 of the tile at (off_m, off_n) by 3xTF32:
    a_desc holds A's TF32 parts stacked, (2M, K), b_desc B^T's, (2N, K); a_hi b_hi + a_hi b_lo +
    a_lo b_hi, from the four tiles loaded once per K step; the missing a_lo b_lo is 2^-22 of a
    product. (A_T, B_T, UPCAST: unused, the engine's persistent schedule passes them; its OPTION
    is CHUNK.)

    The sum goes in two levels. For CHUNK K steps the tensor cores chain their products, a_hi b_hi
    into one accumulator and the small cross terms into another, started at zero; then the chunk
    joins the running total by one float32 add. The tensor cores add at their accumulator's
    magnitude and drop low bits (accumulated straight into the running total over all of K, the
    error measured far above SGEMM's), so the chunk is kept short; adding every K step instead
    drained their pipeline each step (docs/ladder/r13-tensorcore-f32.md, "The lesson").
    An Inf or NaN in the operands makes the small products' sum Inf or NaN (Inf times a low part
    of either sign, or times 0); it is dropped, and the a_hi b_hi sum, where Inf and NaN stand
    whole, carries IEEE's result."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(step_from, step_to, CHUNK):
        big = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(c0, tl.minimum(c0 + CHUNK, step_to)):    # pipelined, chained
            k0 = step * BLOCK_K
            a_hi = a_desc.load([off_m, k0])
            b_hi = b_desc.load([off_n, k0]).T
            a_lo = a_desc.load([M + off_m, k0])
            b_lo = b_desc.load([N + off_n, k0]).T
            small = tl.dot(a_lo, b_hi, small, input_precision="tf32")
            small = tl.dot(a_hi, b_lo, small, input_precision="tf32")
            big = tl.dot(a_hi, b_hi, big, input_precision="tf32")
        acc += big + tl.where(tl.abs(small) < float("inf"), small, 0.0)    # one float32 add a chunk
    return acc
# --8<-- [end:steps]


@triton.jit
def tf32_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, A_T: tl.constexpr, B_T: tl.constexpr,
               UPCAST: tl.constexpr, OPTION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """The float32 sum of K steps step_from..step_to - 1 by one TF32 product (precision="tf32" on
    the persistent schedule): A row-major, B given K-major (as B^T); the other flags unused."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(step_from, step_to):
        k0 = step * BLOCK_K
        acc = tl.dot(a_desc.load([off_m, k0]), b_desc.load([off_n, k0]).T, acc)    # float32 operands: TF32
    return acc


@triton.jit
def ieee_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                top_a_ptr=None, top_b_ptr=None):
    """C = A @ B in IEEE float32 on the FMA units, a program a tile, pointers and masks (rung 10's
    pointer program in float32): short sums, where splitting into TF32 parts costs more. top_a_ptr
    and top_b_ptr given (each row of A's and column of B's largest |x|, float32): only the tiles
    that meet a row or column holding Inf or NaN are computed and stored (precision="int8")."""
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    steps = tl.cdiv(K, BLOCK_K)
    if top_a_ptr is not None:
        top_a = tl.load(top_a_ptr + offs_m, mask=offs_m < M, other=0.0)
        top_b = tl.load(top_b_ptr + offs_n, mask=offs_n < N, other=0.0)
        meets = tl.maximum(tl.max(tl.where(tl.abs(top_a) < float("inf"), 0, 1), axis=0),   # NaN: 1 too
                           tl.max(tl.where(tl.abs(top_b) < float("inf"), 0, 1), axis=0))
        steps = steps * meets
        offs_m = tl.where(meets > 0, offs_m, M)          # nothing stored where it meets none
    rows_a, cols_b = offs_m.to(tl.int64), offs_n.to(tl.int64)
    ks = offs_k.to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols_b[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, steps):
        k_left = K - step * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows_a[:, None] * stride_cm + cols_b[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def tf32_matmul(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn, PARTS: tl.constexpr, CHUNK: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B on TF32 tensor cores. a_desc: A's parts stacked (PARTS * M, K), K contiguous;
    b_desc: B's, transposed (PARTS * N, K). PARTS == 1: one TF32 product. PARTS == 2 (3xTF32):
    tf32x3_steps, in chunks of CHUNK K steps."""
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    if PARTS == 2:
        acc = tf32x3_steps(a_desc, b_desc, off_m, off_n, 0, tl.cdiv(K, BLOCK_K), M, N, False, True, False, CHUNK,
                           BLOCK_M, BLOCK_N, BLOCK_K)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([off_m, k0]), b_desc.load([off_n, k0]).T, acc, input_precision="tf32")
    store_tile(c_ptr, acc, off_m, off_n, M, N, stride_cm, stride_cn, False)


@triton.jit
def unscale(exact_ptr, row_ptr, col_ptr, c_ptr, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr):
    """c[i, j] = exact[i, j] * row[i] * col[j] rounded once to float32: exact the int64 product
    (M, N) of precision="int8" (contiguous), row and col float64 powers of two (the fixed-point
    scales' inverses: exact products)."""
    offs_m = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    inside = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    exact = tl.load(exact_ptr + offs_m[:, None] * N + offs_n[None, :], mask=inside, other=0)
    row = tl.load(row_ptr + offs_m, mask=offs_m < M, other=0.0)
    col = tl.load(col_ptr + offs_n, mask=offs_n < N, other=0.0)
    c = exact.to(tl.float64) * row[:, None] * col[None, :]
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c.to(tl.float32), mask=inside)
