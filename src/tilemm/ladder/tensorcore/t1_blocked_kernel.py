"""The Triton program of rung `tensorcore` (see t1_blocked.py). Kept apart so that importing
tilemm never imports Triton: it loads on the first launch, after TRITON_INTERPRET is read."""
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  UPCAST: tl.constexpr, FP64: tl.constexpr):
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak   # (BLOCK_M, BLOCK_K)
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn   # (BLOCK_K, BLOCK_N)
    if FP64:                                              # float64: the FP64 tensor cores (DMMA)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - step * BLOCK_K                       # edges load zeros: any M, N, K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0)
        if FP64:
            acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float64)  # 3.6 needs out_dtype
        elif UPCAST:  # only in Triton's interpreter, whose bfloat16 tl.dot returns garbage (3.9, seen
            # here): bfloat16 products are exact in float32, so this is the same sum
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)                       # tensor cores, float32 accumulators
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)                    # one rounding, as NumPy's float16
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def tile_position(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row, column) of C where tile number `tile` starts: tiles are numbered in groups of GROUP_M
    block rows that walk one block column before the next, so that neighbours share B in L2."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_in_group = GROUP_M * tl.cdiv(N, BLOCK_N)
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
    pid_n = (tile % num_pid_in_group) // group_size_m
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def matmul_tma(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn,
               A_T: tl.constexpr, B_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr):
    """The same product with the tiles brought in by TMA (Hopper's bulk tensor copy): no address
    arithmetic, no masks (the copy engine fills zeros past M, N and K). a_desc describes A, or A^T
    when A_T (A stored column-major); b_desc B, or B^T when B_T."""
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if A_T:
            a = a_desc.load([k0, off_m]).T                # (BLOCK_K, BLOCK_M) of A^T
        else:
            a = a_desc.load([off_m, k0])                  # (BLOCK_M, BLOCK_K)
        if B_T:
            b = b_desc.load([off_n, k0]).T                # (BLOCK_N, BLOCK_K) of B^T
        else:
            b = b_desc.load([k0, off_n])                  # (BLOCK_K, BLOCK_N)
        if UPCAST:   # Triton's interpreter only: see matmul_kernel
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
