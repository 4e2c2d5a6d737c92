"""The Triton program of tilemm's fused epilogues (launched by epilogue_launch.py): rung 9's tiled
GEMM on tensor cores, with what usually follows a product done in registers before the one store:

    Z = alpha * (A @ B) [+ beta * C] [+ bias]       (bias a row over N, or a column over M)
    Y = activation(Z) [+ residual]                  (relu, gelu (erf), gelu_tanh, silu)

Y is rounded once, to its dtype; Z can be stored too (the AUX output, nvmath-python's name): the
backward of gelu and silu needs the pre-activation. Kept apart so that importing tilemm never
imports Triton: it loads on the first launch, after TRITON_INTERPRET is read.

Constraints:
- float16, bfloat16 (float32 sums), float32 (IEEE products: no TF32) or float64 (float64 sums);
- any M, N, K (edges are masked, K = 0 gives the epilogue of zeros) and any strides of every operand;
- 64-bit offsets (once a tile): no 2^31-element limit.
"""
import triton
import triton.language as tl

from tilemm.engine.programs import tile_position
from tilemm.system import compat

# the activation's code, a constexpr of the program (epilogue_launch.ACTIVATION_CODES names them)
IDENTITY, RELU, GELU, GELU_TANH, SILU = 0, 1, 2, 3, 4


LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
# the special-function units' approximate 2^x and 1/x (one instruction each, denormals flushed to 0):
# on the GPU; Triton's interpreter runs no PTX, and takes tl.exp2 and a division
FAST_UNITS: tl.constexpr = tl.constexpr(not compat.triton_interpreter())


@triton.jit
def exp2_f32(x):
    """2^x of float32 x."""
    if FAST_UNITS:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)
    return tl.exp2(x)


@triton.jit
def reciprocal_f32(x):
    """1 / x of float32 x."""
    if FAST_UNITS:
        return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                         pack=1)
    return 1.0 / x


@triton.jit
def normal_cdf_f32(z):
    """Phi(z) = erfc(-z / sqrt(2)) / 2 of float32 z, within 2e-6 of itself from z = -5 up and 2e-5
    below (the rounding of z^2 in exp's argument), where 1 + erf(z / sqrt(2)) cancels to nothing
    (torch's float32 gelu is 0 past z = -5.9): one 2^x, one 1/x and a dozen multiply-adds; gelu
    takes 21 instructions an element on sm_90 against 33 by libdevice's erf, and an epilogue's
    time is its instructions."""
    # erfc(x) = t exp(-x^2 + P(t)), t = 1 / (1 + x / 2), x >= 0: Numerical Recipes' erfcc, a
    # fractional error under 1.2e-7 for every x; P's coefficients by Horner, highest power first
    x = tl.abs(z) * 0.7071067811865476
    t = reciprocal_f32(1.0 + 0.5 * x)
    p = 0.17087277 * t - 0.82215223
    p = p * t + 1.48851587
    p = p * t - 1.13520398
    p = p * t + 0.27886807
    p = p * t - 0.18628806
    p = p * t + 0.09678418
    p = p * t + 0.37409196
    p = p * t + 1.00002368
    p = p * t - 1.26551223
    half_erfc = t * exp2_f32((p - x * x) * LOG2E - 1.0)    # erfc(|z| / sqrt(2)) / 2 (the -1: the half)
    return tl.where(z < 0, half_erfc, 1.0 - half_erfc)


@triton.jit
def activate(z, ACTIVATION: tl.constexpr):
    """activation(z), elementwise, in z's dtype (float32 or float64). float32 through the
    special-function units' 2^x and 1/x (the epilogue's time is its instructions); float64 by
    libdevice's erf, exp and division."""
    if ACTIVATION == 1:                                  # relu
        z = tl.where(z > 0, z, 0.0)
    elif ACTIVATION == 2:                                # gelu, torch's default: z * Phi(z)
        if z.dtype == tl.float64:
            z = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
        else:
            z = z * normal_cdf_f32(z)
    elif ACTIVATION == 3:                                # gelu, tanh's approximation (torch's "tanh")
        inner = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        # tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|): no tanh in tl's core, no overflow
        if z.dtype == tl.float64:
            e = tl.exp(-2.0 * tl.abs(inner))
            t = (1.0 - e) / (1.0 + e)
        else:
            e = exp2_f32(tl.abs(inner) * (-2.0 * LOG2E))
            t = (1.0 - e) * reciprocal_f32(1.0 + e)
        z = 0.5 * z * (1.0 + tl.where(inner < 0, -t, t))
    elif ACTIVATION == 4:                                # silu: z * sigmoid(z) = z / (1 + exp(-z))
        # exp(-z) overflows to inf past z = -88, and z / inf is the -0.0 silu rounds to
        if z.dtype == tl.float64:
            z = z / (1.0 + tl.exp(-z))
        else:
            z = z * reciprocal_f32(1.0 + exp2_f32(z * -LOG2E))
    return z


# --8<-- [start:kernel]
@triton.jit
def finish(acc, off_m, off_n, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, stride_ym, stride_yn, stride_xm,
           stride_xn, stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta,
           BIAS_OVER_M: tl.constexpr, ACTIVATION: tl.constexpr):
    """The epilogue of the sums acc of Y[off_m:, off_n:], in acc's dtype: each extra operand read
    once, Z stored into AUX where given, Y rounded once to its dtype; inside Y only. 64-bit offsets."""
    offs_m = tl.arange(0, acc.shape[0]).to(tl.int64) + off_m
    offs_n = tl.arange(0, acc.shape[1]).to(tl.int64) + off_n
    inside = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    # alpha and beta in acc's dtype: a compiled graph passes Python floats as float64 (Triton's own
    # launch as float32), and float64 scalars would take the whole epilogue into float64
    z = acc * tl.cast(alpha, acc.dtype)
    if c_ptr is not None:                                 # accumulate into C: beta * C
        c = tl.load(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, mask=inside, other=0.0)
        z += tl.cast(beta, acc.dtype) * c.to(acc.dtype)
    if bias_ptr is not None:
        if BIAS_OVER_M:                                   # a column: one value a row of Y
            bias = tl.load(bias_ptr + offs_m * stride_bias, mask=offs_m < M, other=0.0)
            z += bias.to(acc.dtype)[:, None]
        else:                                             # a row: one value a column (a Linear's)
            bias = tl.load(bias_ptr + offs_n * stride_bias, mask=offs_n < N, other=0.0)
            z += bias.to(acc.dtype)[None, :]
    if aux_ptr is not None:                               # the pre-activation, for the backward
        tl.store(aux_ptr + offs_m[:, None] * stride_xm + offs_n[None, :] * stride_xn,
                 z.to(aux_ptr.dtype.element_ty), mask=inside)
    y = activate(z, ACTIVATION)
    if res_ptr is not None:
        r = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn, mask=inside, other=0.0)
        y += r.to(acc.dtype)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y.to(y_ptr.dtype.element_ty),
             mask=inside)                                 # one rounding, to Y's dtype


@triton.jit
def matmul_epilogue_kernel(a_ptr, b_ptr, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, K,
                           stride_am, stride_ak, stride_bk, stride_bn, stride_ym, stride_yn,
                           stride_xm, stride_xn, stride_bias, stride_cm, stride_cn, stride_rm, stride_rn,
                           alpha, beta,
                           BIAS_OVER_M: tl.constexpr, ACTIVATION: tl.constexpr, WIDE: tl.constexpr,
                           UPCAST: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                           SPLIT: tl.constexpr):
    """Y = activation(alpha * A @ B + beta * C + bias) + residual, one BLOCK_M x BLOCK_N tile a
    program. aux_ptr, bias_ptr, c_ptr, res_ptr: None where not given (Triton compiles a program
    without them). WIDE: 0 float32 products of 16-bit inputs on tensor cores, 1 float32 IEEE
    products, 2 float64. UPCAST: 16-bit tiles widened to float32 first (Triton's interpreter,
    whose bfloat16 tl.dot is wrong; a 16-bit product is exact in float32: the same sums).
    EVEN_K: BLOCK_K divides K, and the tiles load with no mask at all. SPLIT (thin tiles of 16-bit
    operands; 0: none): each K step's sums in SPLIT parts (split_sums)."""
    # Which tile: groups of GROUP_M block rows walk one block column before the next (rung 9's order)
    off_m, off_n = tile_position(tl.program_id(axis=0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    # 64-bit row and column numbers: offsets past 2^31 elements are right (once a tile: free)
    offs_m = (off_m + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = (off_n + tl.arange(0, BLOCK_N)).to(tl.int64)
    # rows of A and columns of B past M and N wrap around to ones inside (Triton's tutorial): the
    # loads need no mask there, and what those rows and columns give is never stored
    rows_a, cols_b = offs_m % M, offs_n % N
    if SPLIT > 0:
        acc = split_sums(a_ptr, b_ptr, rows_a, cols_b, K, stride_am, stride_ak, stride_bk, stride_bn, UPCAST, BLOCK_K,
                         SPLIT)
    else:
        offs_k = tl.arange(0, BLOCK_K).to(tl.int64)
        a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :] * stride_ak    # (BLOCK_M, BLOCK_K)
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + cols_b[None, :] * stride_bn    # (BLOCK_K, BLOCK_N)

        if WIDE == 2:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:                                             # K's edge loads zeros: any K
                k_left = K - k * BLOCK_K
                a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            if WIDE == 2:
                acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float64)
            elif WIDE == 1:
                acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float32)
            elif UPCAST:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee", out_dtype=tl.float32)
            else:
                acc = tl.dot(a, b, acc, out_dtype=tl.float32)   # tensor cores, float32 sums
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

    # The epilogue, on the sums in registers: each extra operand read once, a tile at a time
    finish(acc, off_m, off_n, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, stride_ym,
           stride_yn, stride_xm, stride_xn, stride_bias, stride_cm, stride_cn, stride_rm, stride_rn, alpha, beta,
           BIAS_OVER_M, ACTIVATION)
# --8<-- [end:kernel]


@triton.jit
def split_sums(a_ptr, b_ptr, rows, cols, K, stride_am, stride_ak, stride_bk, stride_bn, UPCAST: tl.constexpr,
               BLOCK_K: tl.constexpr, SPLIT: tl.constexpr):
    """The float32 sums of A[rows, :] @ B[:, cols] (int64 numbers of rows and columns inside A and
    B) of 16-bit operands, BLOCK_K of K a step, each step's K cut into SPLIT parts summed apart (a
    batched dot) and the parts folded in a fixed order at the end. A thin tile's sums are a few
    chains of mma.sync along K, each instruction waiting on the last: SPLIT times as many chains, a
    SPLIT-th as long, keep more warps and the tensor cores busy (epilogue_launch.THIN_PARTS). Whole
    steps load with no mask, a last part step zeros past K."""
    PART: tl.constexpr = BLOCK_K // SPLIT
    parts = tl.arange(0, SPLIT).to(tl.int64)
    within = tl.arange(0, PART).to(tl.int64)
    k_a = parts[:, None, None] * PART + within[None, None, :]            # (SPLIT, 1, PART)
    k_b = parts[:, None, None] * PART + within[None, :, None]            # (SPLIT, PART, 1)
    a_ptrs = a_ptr + rows[None, :, None] * stride_am + k_a * stride_ak    # (SPLIT, BLOCK_M, PART)
    b_ptrs = b_ptr + k_b * stride_bk + cols[None, None, :] * stride_bn    # (SPLIT, PART, BLOCK_N)
    acc = tl.zeros((SPLIT, rows.shape[0], cols.shape[0]), dtype=tl.float32)
    for step in range(0, K // BLOCK_K):
        acc = step_sum(tl.load(a_ptrs), tl.load(b_ptrs), acc, UPCAST)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    k_left = K % BLOCK_K
    if k_left > 0:
        a = tl.load(a_ptrs, mask=k_a < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=k_b < k_left, other=0.0)
        acc = step_sum(a, b, acc, UPCAST)
    if SPLIT >= 8:
        acc = fold(acc)
    if SPLIT >= 4:
        acc = fold(acc)
    if SPLIT >= 2:
        acc = fold(acc)
    return tl.reshape(acc, (rows.shape[0], cols.shape[0]))


@triton.jit
def fold(x):
    """(2S, M, N) -> (S, M, N): x's first S parts plus its last S, part by part."""
    S: tl.constexpr = x.shape[0] // 2
    first, last = tl.split(tl.permute(tl.reshape(x, (2, S, x.shape[1], x.shape[2])), (1, 2, 3, 0)))
    return first + last


@triton.jit
def step_sum(a, b, acc, UPCAST: tl.constexpr):
    """acc + a @ b in float32: on tensor cores, or with UPCAST (Triton's interpreter, whose
    bfloat16 tl.dot is wrong) in float32 products, exact for 16-bit operands."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)
