"""The Triton program of tensorcore-int's small-M product on the 16-bit tensor cores
(r11_int8_small_m.py, products "fp16" and "fp16-swap"): int8 x int8 -> exact int32 through
float16 products summed in float32, flushed into int32 every CHUNK_STEPS K steps. Kept apart so
that importing tilemm never imports Triton."""
import triton
import triton.language as tl

from tilemm.ladder.tensorcore.r11_int8_small_m_kernel import tile_and_run, tile_into_c


# --8<-- [start:kernel]
@triton.jit
def small_m_f16_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                       CHUNK_STEPS: tl.constexpr, SWAP: tl.constexpr = False,
                       BIAS_CVT: tl.constexpr = True, split_steps=None, ws_ptr=None, counts_ptr=None):
    """C = A @ B, int8 operands of any strides, exact int32 sums, on the 16-bit tensor cores: every
    int8 is exact in float16, a product at most 2^14, so the float32 sum of CHUNK_STEPS * BLOCK_K
    <= 512 products is an exact integer under 2^23; it is added into an int32 total (wrapping as
    NumPy's int32 does) and starts again. The 16-bit instructions read B from shared memory in
    either major order, so a row-major B needs no turning over: one program for both layouts, the
    loads' order set by the strides (a stride of 1 is specialized at launch). SWAP: C^T = B^T A^T,
    so the weight's columns fill the instruction's 64-row side (its operand from registers,
    converted there) and the few rows of A its other side (8 to 256). The grid, the runs of split K and the hand-over
    are small_m_matmul's (r11_int8_small_m_kernel.py)."""
    pid_m, pid_n, offs_m, offs_n, offs_k, first, steps, rows, ks = tile_and_run(M, N, K, split_steps, BLOCK_M,
                                                                                BLOCK_N, BLOCK_K)
    cols = offs_n.to(tl.int64)
    if SWAP:      # tiles as the product reads them: B^T (BLOCK_N, BLOCK_K) and A^T (BLOCK_K, BLOCK_M)
        a_ptrs = a_ptr + ks[:, None] * stride_ak + rows[None, :] * stride_am
        b_ptrs = b_ptr + cols[:, None] * stride_bn + ks[None, :] * stride_bk
        a_in, a_k = offs_m[None, :] < M, offs_k[:, None]
        b_in, b_k = offs_n[:, None] < N, offs_k[None, :]
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.int32)
    else:
        a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
        b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
        a_in, a_k = offs_m[:, None] < M, offs_k[None, :]
        b_in, b_k = offs_n[None, :] < N, offs_k[:, None]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    sums = tl.zeros(acc.shape, dtype=tl.float32)
    for step in range(first, steps):      # rows past M and columns past N load zeros (masks keep K's contiguity)
        if EVEN_K:
            a = tl.load(a_ptrs, mask=a_in, other=0)
            b = tl.load(b_ptrs, mask=b_in, other=0)
        else:
            left = K - step * BLOCK_K                      # K from this step's start
            a = tl.load(a_ptrs, mask=a_in & (a_k < left), other=0)
            b = tl.load(b_ptrs, mask=b_in & (b_k < left), other=0)
        if SWAP:
            sums = tl.dot(to_f16(b, BIAS_CVT), to_f16(a, BIAS_CVT), sums)
        else:
            sums = tl.dot(to_f16(a, BIAS_CVT), to_f16(b, BIAS_CVT), sums)
        if (step - first) % CHUNK_STEPS == CHUNK_STEPS - 1:   # a chunk's exact float32 sum into int32
            acc += sums.to(tl.int32)
            sums = tl.zeros(acc.shape, dtype=tl.float32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc += sums.to(tl.int32)
    if SWAP:          # C^T's tile: C with its dimensions and strides swapped
        tile_into_c(acc, c_ptr, ws_ptr, counts_ptr, pid_n * BLOCK_N, pid_m * BLOCK_M, N, M, stride_cn, stride_cm,
                    split_steps)
    else:
        tile_into_c(acc, c_ptr, ws_ptr, counts_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn,
                    split_steps)


@triton.jit
def to_f16(x, BIAS_CVT: tl.constexpr):
    """int8 x as float16, exactly. BIAS_CVT: by integer and half-precision adds, x + 128 in the
    low byte of 1024.0's bits (0x6480 + x: 1024 + 128 + x, whose unit is 1) less 1152.0, which the
    compiler can do two values a register; else a conversion instruction a value (a quarter-rate
    instruction on Hopper: on a tile of the weight it costs more than the tensor cores' time)."""
    if BIAS_CVT:
        biased = (x.to(tl.int16) + 0x6480).to(tl.int16).to(tl.float16, bitcast=True)
        return biased - tl.full(x.shape, 1152.0, tl.float16)      # (a float literal might promote to float32)
    return x.to(tl.float16)
# --8<-- [end:kernel]
