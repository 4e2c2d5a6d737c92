"""The Triton programs of rung `tensorcore-f32` (see t4_f32.py): the split of float32 operands
into TF32 parts, K-major, the product of the parts, and the scaling back of precision="int8"'s
exact integer product (its digits are split and multiplied by tensorcore-int's programs). Kept apart so that importing tilemm never
imports Triton."""
import triton
import triton.language as tl

from .t1_blocked_kernel import store_tile, tile_position


@triton.jit
def split_tf32(x_ptr, out_ptr, R, C, C_PAD, stride_r, stride_c,
               PARTS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """out[0] = x rounded to TF32 (10 mantissa bits, to nearest), out[1] = x - out[0] (exact in
    float32) when PARTS == 2; zeros for C <= c < C_PAD. out is contiguous (PARTS, R, C_PAD): passing
    B's strides swapped writes B K-major."""
    offs_r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    offs_c = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    inside = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    x = tl.load(x_ptr + offs_r[:, None] * stride_r + offs_c[None, :] * stride_c, mask=inside, other=0.0)
    out = out_ptr + offs_r[:, None] * C_PAD + offs_c[None, :]
    keep = (offs_r[:, None] < R) & (offs_c[None, :] < C_PAD)
    bits = x.to(tl.int32, bitcast=True)
    finite = (bits & 0x7F800000) != 0x7F800000
    if PARTS == 2:
        # round to nearest on the 13 bits TF32 drops (-8192 = ~0x1FFF); values this rounding
        # could carry to Inf are truncated instead; Inf and NaN stay whole, with no low part
        rounded = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
        truncated = (bits & -8192).to(tl.float32, bitcast=True)
        hi = tl.where(finite, tl.where(tl.abs(x) < 3.0e38, rounded, truncated), x)
        tl.store(out, hi, mask=keep)
        tl.store(out + R * C_PAD, tl.where(finite, x - hi, 0.0), mask=keep)
    else:
        tl.store(out, x, mask=keep)


@triton.jit
def tf32_matmul(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn, PARTS: tl.constexpr, CHUNK: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B on TF32 tensor cores. a_desc: A's parts stacked (PARTS * M, K), K contiguous;
    b_desc: B's, transposed (PARTS * N, K). PARTS == 1: one TF32 product. PARTS == 2 (3xTF32):
    a_hi b_hi + a_hi b_lo + a_lo b_hi, from the four tiles loaded once per K step; the missing
    a_lo b_lo is 2^-22 of a product.

    3xTF32 sums in two levels. For CHUNK K steps the tensor cores chain their products, a_hi b_hi
    into one accumulator and the small cross terms into another, started at zero; then the chunk
    joins the running total by one float32 add. The tensor cores add at their accumulator's
    magnitude and drop low bits (accumulated straight into the running total over all of K: 13x
    SGEMM's error, measured), so the chunk is kept short; adding every K step instead drained
    their pipeline each step (1.40x SGEMM against 1.92x at 4096³, benchmarks/f32_chunk_try.py).
    An Inf or NaN in the operands makes the small products' sum Inf or NaN (Inf times a low part
    of either sign, or times 0); it is dropped, and the a_hi b_hi sum, where Inf and NaN stand
    whole, carries IEEE's result."""
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if PARTS == 2:
        for c0 in range(0, K, CHUNK * BLOCK_K):
            big = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(c0, tl.minimum(c0 + CHUNK * BLOCK_K, K), BLOCK_K):   # pipelined, chained
                a_hi = a_desc.load([off_m, k0])
                b_hi = b_desc.load([off_n, k0]).T
                a_lo = a_desc.load([M + off_m, k0])
                b_lo = b_desc.load([N + off_n, k0]).T
                small = tl.dot(a_lo, b_hi, small, input_precision="tf32")
                small = tl.dot(a_hi, b_lo, small, input_precision="tf32")
                big = tl.dot(a_hi, b_hi, big, input_precision="tf32")
            acc += big + tl.where(tl.abs(small) < float("inf"), small, 0.0)    # one float32 add a chunk
    else:
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
