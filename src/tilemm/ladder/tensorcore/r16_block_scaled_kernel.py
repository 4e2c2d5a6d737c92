"""The Triton program of rung `tensorcore-block-scaled` and its launcher (see r16_block_scaled.py):
float8 products whose scales change along K, by blocks of 128 (DeepGEMM's 1x128 for A and
128x128 for B). Kept apart so that importing tilemm never imports Triton: it loads
on the first launch, after TRITON_INTERPRET is read."""
import torch
import triton
import triton.language as tl

from tilemm.system import compat
from tilemm.engine.launches import Steps, bound_launch

SCALE_BLOCK = 128          # the block scales' block: 1 x 128 of A, 128 x 128 of B


# --8<-- [start:kernel]
@triton.jit
def block_scaled_kernel(a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        stride_sam, stride_sak, stride_sbk, stride_sbn,
                        SCALE_BLOCK: tl.constexpr, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                        BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr, TMA: tl.constexpr):
    """C = (scale_a * A) @ (scale_b * B), one BLOCK_SIZE_M x BLOCK_SIZE_N tile of C a program.
    TMA: a_ptr and b_ptr are TMA descriptors of A (M, K) and of B's transpose (N, K), whose
    loads past an edge read zeros (Hopper's bulk copies: no masks, no address arithmetic).
    Block scales: scale_a (M, K/128) a 1 x 128 block of A, scale_b (K/128, N/128) a
    128 x 128 block of B, applied to each K step's products (BLOCK_SIZE_K divides 128, so a K
    step lies in one block) on their way into the float32 sums."""
    # Which tile: the matmul tutorial's grouped order (GROUP_SIZE_M block rows, then a column)
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    if not TMA:
        a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak   # (BM, BK)
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn   # (BK, BN)
    # the scales of this tile's rows of A (BM,) and of its columns' 128-wide blocks of B (BN,)
    sa_ptrs = sa_ptr + offs_m * stride_sam
    sb_ptrs = sb_ptr + (offs_n // SCALE_BLOCK) * stride_sbn

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_left = K - k * BLOCK_SIZE_K
        if TMA:
            a = a_ptr.load([pid_m * BLOCK_SIZE_M, k * BLOCK_SIZE_K])               # (BM, BK)
            b = b_ptr.load([pid_n * BLOCK_SIZE_N, k * BLOCK_SIZE_K]).T             # (BK, BN)
        else:
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        # this K step's block of scales: (BM,) of A's and (BN,) of B's, masked rows and columns 0
        block = (k * BLOCK_SIZE_K) // SCALE_BLOCK
        scale_a = tl.load(sa_ptrs + block * stride_sak, mask=offs_m < M, other=0.0)
        scale_b = tl.load(sb_ptrs + block * stride_sbk, mask=offs_n < N, other=0.0)
        accumulator += tl.dot(a, b) * (scale_a[:, None] * scale_b[None, :])
        if not TMA:
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(c_ptr.dtype.element_ty)               # one rounding, to C's type

    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
# --8<-- [end:kernel]


def launch(a, b, c, scale_a, scale_b, block_m: int, block_n: int, block_k: int, group_m: int, num_warps: int,
           num_stages: int, tma=None):
    """The program on one program a tile of C (the checks are tilemm.products.block_scaled's): a (M, K) and
    b (K, N) float8; scale_a (M, ceil(K/128)) and scale_b (ceil(K/128), ceil(N/128)), float32,
    any strides. On the GPU the 8-bit tensor-core
    instruction reads both operands K-major: A row-major and B given as (N, K).T are read as they
    are, other layouts are copied K-major first. Returns the launch (a Steps that
    tilemm.engine.replay can run again on other operands) where it read the operands as they are,
    else None."""
    if compat.triton_interpreter() and c.dtype == torch.bfloat16:
        # Triton 3.9's interpreter rounds float32 -> bfloat16 by truncation: there, torch rounds
        wide = c.float()
        launch(a, b, wide, scale_a, scale_b, block_m, block_n, block_k, group_m, num_warps, num_stages, tma)
        c.copy_(wide)
        return None
    copied = False
    if not compat.triton_interpreter():
        copied = a.stride(1) != 1 or b.stride(0) != 1
        a = a if a.stride(1) == 1 else a.contiguous()
        b = b if b.stride(0) == 1 else b.T.contiguous().T
    m, k = a.shape
    n = b.shape[1]
    use_tma = tma is not False and tma_eligible(a, b)
    if tma and not use_tma:
        raise ValueError("tensorcore-block-scaled: tma=True takes A row-major and B as (N, K).T, K a multiple of 16")
    a_in, b_in = a, b
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor
        a_in = TensorDescriptor.from_tensor(a, [block_m, block_k])
        b_in = TensorDescriptor.from_tensor(b.T, [block_n, block_k])
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    steps = Steps([bound_launch(block_scaled_kernel, grid, (
        a_in, b_in, c, scale_a, scale_b, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
        c.stride(1), scale_a.stride(0), scale_a.stride(1), scale_b.stride(0), scale_b.stride(1)), dict(
        SCALE_BLOCK=SCALE_BLOCK, BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k,
        GROUP_SIZE_M=group_m, TMA=use_tma, num_warps=num_warps, num_stages=num_stages))])
    steps()
    return None if copied else steps       # (copies made outside the steps: a replay would not make them)


def tma_eligible(a, b) -> bool:
    """Whether TMA can read A (M, K) and B's transpose (N, K) as they are: rows contiguous, 16-byte
    aligned rows and bases."""
    return (a.stride(1) == 1 and b.stride(0) == 1 and (a.stride(0) * a.element_size()) % 16 == 0
            and (b.stride(1) * b.element_size()) % 16 == 0 and a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
