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

Constraints: float16 / bfloat16 operands (float32 sums); A and B each with rows, or columns,
contiguous and 16-byte aligned (A_T / B_T: the descriptor is of the transpose); K >= 1; tiles
powers of two of 16 or more, BLOCK_N a multiple of 64 (quarters of 16 or more).
"""
import triton
import triton.language as tl

from tilemm.engine.epilogue_kernel import finish
from tilemm.engine.programs import halves, step_tiles, tile_position


# --8<-- [start:kernel]
@triton.jit
def matmul_epilogue_persistent(a_in, b_in, y_ptr, aux_ptr, bias_ptr, c_ptr, res_ptr, M, N, K,
                               stride_a, stride_b, stride_ym, stride_xm, stride_bias, stride_cm, stride_cn,
                               stride_rm, stride_rn, alpha, beta,
                               A_T: tl.constexpr, B_T: tl.constexpr, BIAS_OVER_M: tl.constexpr,
                               ACTIVATION: tl.constexpr, UPCAST: tl.constexpr, MAKE_DESCRIPTORS: tl.constexpr,
                               Y_ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr,
                               FLATTEN: tl.constexpr):
    """Y = activation(alpha * A @ B + beta * C + bias) + residual (and Z into AUX), PROGRAMS
    programs walking the BLOCK_M x BLOCK_N tiles. a_in / b_in: TMA descriptors of A (or A^T when
    A_T) and B (or B^T when B_T), or with MAKE_DESCRIPTORS those tensors' pointers, whose row
    strides are stride_a / stride_b. aux_ptr, bias_ptr, c_ptr, res_ptr: None where not given.
    Y_ALIGN: a power of two dividing N, stride_ym and stride_xm (Y's and AUX's rows stored that
    many elements at a time). UPCAST: Triton's interpreter (its bfloat16 tl.dot is wrong)."""
    N = N // Y_ALIGN * Y_ALIGN                   # no-ops that say Y_ALIGN divides them
    stride_ym, stride_xm = stride_ym // Y_ALIGN * Y_ALIGN, stride_xm // Y_ALIGN * Y_ALIGN
    if MAKE_DESCRIPTORS:                         # (rows, columns) of what each descriptor reads
        if A_T:
            a_desc = tl.make_tensor_descriptor(a_in, [K, M], [stride_a, 1], [BLOCK_K, BLOCK_M])
        else:
            a_desc = tl.make_tensor_descriptor(a_in, [M, K], [stride_a, 1], [BLOCK_M, BLOCK_K])
        if B_T:
            b_desc = tl.make_tensor_descriptor(b_in, [N, K], [stride_b, 1], [BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(b_in, [K, N], [stride_b, 1], [BLOCK_K, BLOCK_N])
    else:
        a_desc = a_in
        b_desc = b_in
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    QUARTER: tl.constexpr = BLOCK_N // 4
    for tile in tl.range(tl.program_id(0), num_tiles, PROGRAMS, flatten=FLATTEN):
        off_m, off_n = tile_position(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(0, k_steps):
            a, b = step_tiles(a_desc, b_desc, off_m, off_n, step * BLOCK_K, A_T, B_T)  # (BM, BK), (BK, BN)
            if UPCAST:     # a 16-bit product is exact in float32: the same sums
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)              # tensor cores, float32 sums
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
