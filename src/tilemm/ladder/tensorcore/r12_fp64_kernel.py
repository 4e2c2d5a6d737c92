"""The Triton programs of rung `tensorcore-f64` (see r12_fp64.py): rung 10's programs with float64
tiles and a float64 accumulator, whose tl.dot Triton issues on the FP64 tensor cores (DMMA). Kept
apart so that importing tilemm never imports Triton."""
import triton
import triton.language as tl

from tilemm.engine.programs import step_tiles, tile_position


# --8<-- [start:kernel]
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  ALIGN: tl.constexpr = (1, 1, 1, 1, 1, 1, 1, 1, 1)):
    """C = A @ B in float64, a program a tile, pointers and masks: rung 10's pointer program
    (ALIGN as there) with float64 sums; K is not split (its partials would be float32)."""
    M, N, K = M // ALIGN[0] * ALIGN[0], N // ALIGN[1] * ALIGN[1], K // ALIGN[2] * ALIGN[2]
    stride_am, stride_ak = stride_am // ALIGN[3] * ALIGN[3], stride_ak // ALIGN[4] * ALIGN[4]
    stride_bk, stride_bn = stride_bk // ALIGN[5] * ALIGN[5], stride_bn // ALIGN[6] * ALIGN[6]
    stride_cm, stride_cn = stride_cm // ALIGN[7] * ALIGN[7], stride_cn // ALIGN[8] * ALIGN[8]
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    steps = tl.cdiv(K, BLOCK_K)
    rows_a, cols_b = offs_m.to(tl.int64), offs_n.to(tl.int64)
    ks = offs_k.to(tl.int64)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols_b[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
    for step in range(0, steps):
        k_left = K - step * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0)
        acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float64)  # DMMA; 3.6 needs out_dtype
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows_a[:, None] * stride_cm + cols_b[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
# --8<-- [end:kernel]


@triton.jit
def f64_steps(a_desc, b_desc, off_m, off_n, step_from, step_to, M, N, A_T: tl.constexpr, B_T: tl.constexpr,
              UPCAST: tl.constexpr, OPTION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr):
    """The float64 sum of K steps step_from..step_to - 1 of the tile at (off_m, off_n), float64
    tiles brought in by TMA: what the persistent schedule (tilemm.engine.programs.matmul_persistent)
    runs on each tile past one round of tiles (UPCAST, OPTION: unused)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
    for step in range(step_from, step_to):
        k0 = step * BLOCK_K
        a, b = step_tiles(a_desc, b_desc, off_m, off_n, k0, A_T, B_T)
        acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float64)
    return acc
