"""The Triton program of rung `tensorcore-tutorial` and its launcher (see r09_tutorial.py): Triton's
matmul tutorial, with masks for any M, N, K. Kept apart so that importing tilemm never imports
Triton: it loads on the first launch, after TRITON_INTERPRET is read."""
import torch
import triton
import triton.language as tl

from tilemm.system import compat

DTYPES = (torch.float16, torch.bfloat16)
OFFSET_LIMIT = 2**31        # the kernel addresses elements with 32-bit offsets


# --8<-- [start:kernel]
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    """C = A @ B, one BLOCK_SIZE_M x BLOCK_SIZE_N tile of C a program."""
    # Which tile: programs are numbered in groups of GROUP_SIZE_M block rows that walk one block
    # column before the next, so that programs running at the same time share tiles of B in L2.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Pointers to the first (BLOCK_SIZE_M, BLOCK_SIZE_K) tile of A and (BLOCK_SIZE_K, BLOCK_SIZE_N)
    # tile of B: any strides, so transposed views are read as they are.
    offs_am = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    # Walk K a tile at a time. tl.dot multiplies the two tiles on the tensor cores, adding into
    # float32 sums; Triton stages the tiles through shared memory itself (num_stages deep). Loads
    # past an edge of A or B are masked and read as 0, which adds nothing: any M, N, K.
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    # --- exercise: begin
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_left = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=(offs_am[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_bn[None, :] < N), other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    # --- exercise: end
    c = accumulator.to(c_ptr.dtype.element_ty)       # one rounding, to C's 16-bit type

    # Write the tile, what lies inside C.
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)
# --8<-- [end:kernel]


def matmul(a, b, c=None, block_m: int = 128, block_n: int = 256, block_k: int = 64, group_m: int = 8,
           num_warps: int = 8, num_stages: int = 3):
    """c = a @ b for float16 or bfloat16 torch tensors on one device (float32 sums, one rounding);
    c, if given, receives it. Returns c. Raises TypeError or ValueError, naming the problem, before
    any launch."""
    # (1) check the constraints
    check(a, b, c, block_m, block_n, block_k)
    m, k = a.shape
    n = b.shape[1]
    # (2) allocate C, or take the caller's
    if c is None:
        c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    # (3) launch one program a tile of C
    if m and n:
        launch(a, b, c, block_m, block_n, block_k, group_m, num_warps, num_stages)
    return c


def check(a, b, c, block_m: int, block_n: int, block_k: int) -> None:
    """Raises TypeError or ValueError naming the constraint of the kernel that a call breaks."""
    if not all(isinstance(x, torch.Tensor) for x in (a, b)) or not (c is None or isinstance(c, torch.Tensor)):
        raise TypeError("tensorcore-tutorial: a, b and c must be torch tensors")
    if a.dtype not in DTYPES or b.dtype != a.dtype:
        raise TypeError(f"tensorcore-tutorial: a is {a.dtype} and b {b.dtype}; both must be torch.float16 or "
                        "both torch.bfloat16")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tensorcore-tutorial: shapes {tuple(a.shape)} and {tuple(b.shape)} are not (M, K) and (K, N)")
    m, n = a.shape[0], b.shape[1]
    if c is not None and (tuple(c.shape) != (m, n) or c.dtype != a.dtype):
        raise ValueError(f"tensorcore-tutorial: c is {tuple(c.shape)} {c.dtype}, not ({m}, {n}) {a.dtype}")
    if len({x.device for x in (a, b, c) if x is not None}) != 1:
        raise ValueError("tensorcore-tutorial: a, b and c must be on one device")
    for name, size in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        if size < 16 or size & (size - 1):
            raise ValueError(f"tensorcore-tutorial: {name}={size}; tiles are powers of two, 16 or more "
                             "(tl.dot's smallest)")
    for name, x in (("a", a), ("b", b), ("c", c)):
        if x is not None and x.numel() and furthest_offset(x) >= OFFSET_LIMIT:
            raise ValueError(f"tensorcore-tutorial: {name} reaches elements {OFFSET_LIMIT} or more past its "
                             "start, past the kernel's 32-bit offsets (rung 10, tensorcore, takes it)")


def furthest_offset(x) -> int:
    """How many elements past its first the last element of x lies."""
    return sum((size - 1) * abs(stride) for size, stride in zip(x.shape, x.stride()))


def launch(a, b, c, block_m: int, block_n: int, block_k: int, group_m: int, num_warps: int, num_stages: int):
    """The kernel on a grid of one program a tile of C (the checks are matmul's)."""
    if compat.triton_interpreter() and c.dtype == torch.bfloat16:
        # Triton's interpreter multiplies bfloat16 wrongly (NumPy has none): there the same sums
        # from float32 copies (a product of two bfloat16 values is exact in float32), rounded once by torch
        wide = torch.empty(c.shape, dtype=torch.float32, device=c.device)
        launch(a.float(), b.float(), wide, block_m, block_n, block_k, group_m, num_warps, num_stages)
        c.copy_(wide)
        return
    m, k = a.shape
    n = b.shape[1]
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k,
                        GROUP_SIZE_M=group_m, num_warps=num_warps, num_stages=num_stages)
