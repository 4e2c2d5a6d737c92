"""Try (issue 9, TF32 at 0.9x cuBLAS TF32): no K-major copy of B at all.

wgmma reads a 32-bit operand from shared memory K-major only, so `tensorcore-f32` writes a
row-major B K-major first (hidden behind the product in panels since session 6). Its first
operand may instead come from registers, in any layout. Here C^T = B^T A^T: B's row-major tiles,
transposed, are the first operand (taken into registers: `+ 0.0` makes them a computed value, which
Triton passes to the tensor cores from registers) and A's row-major tiles, transposed, the second
(K-major as wgmma wants); C^T's tile is stored transposed into C. Beside it the same without the
`+ 0.0` (Triton chooses), the rung as it is, and cuBLAS TF32; every answer checked against TF32's
bound first, a wrong one recorded and left out of the timing; interleaved rounds, CUDA events,
medians.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/tf32_swap_try.py --out DIR --n 4096
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import tilemm
from tilemm.ladder.tensorcore.t1_blocked_kernel import store_tile, tile_position

import gpu_ladder  # noqa: E402  (pre-warm, --out/--n, checked variants)
from tensorcore_vs_cublas import tf32_checked  # noqa: E402


@triton.jit
def tf32_swapped(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn, IN_REGISTERS: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B with A (M, K) and B (K, N) row-major, as C^T = B^T A^T: a tile of C^T is BLOCK_N
    columns of C by BLOCK_M rows."""
    off_n, off_m = tile_position(tl.program_id(0), N, M, BLOCK_N, BLOCK_M, GROUP_M)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        bt = b_desc.load([k0, off_n]).T           # (BLOCK_N, BLOCK_K): N-major
        if IN_REGISTERS:
            bt = bt + 0.0
        at = a_desc.load([off_m, k0]).T           # (BLOCK_K, BLOCK_M): K-major
        acc = tl.dot(bt, at, acc, input_precision="tf32")
    store_tile(c_ptr, acc, off_n, off_m, N, M, stride_cn, stride_cm, False)   # C^T's tile: C's strides swapped


def swapped(a, b, c, in_registers, block_m, block_n, block_k=32, num_warps=8, num_stages=4):
    m, k = a.shape
    n = b.shape[1]
    a_desc = TensorDescriptor.from_tensor(a, [block_m, block_k])
    b_desc = TensorDescriptor.from_tensor(b, [block_k, block_n])
    grid = (-(-m // block_m) * -(-n // block_n),)
    return lambda: tf32_swapped[grid](a_desc, b_desc, c, m, n, k, c.stride(0), c.stride(1),
                                      IN_REGISTERS=in_registers, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                      GROUP_M=8, num_warps=num_warps, num_stages=num_stages)


VARIANTS = [  # (in_registers, block_m (C^T's columns), block_n (C^T's rows), num_stages)
    (True, 256, 128, 4), (True, 128, 128, 4), (False, 256, 128, 4), (True, 256, 64, 4)]


def main():
    args = gpu_ladder.out_and_n(4096, rounds=4, per_round=0.3, prewarm=8.0)
    n = args.n
    a, b, _ = gpu_ladder.float32_operands(n)
    variants = gpu_ladder.Checked(lambda c: tf32_checked(c, a, b), width=36, wrong_ones_out=True)
    c_blas = torch.empty(n, n, device="cuda")

    def cublas():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.matmul(a, b, out=c_blas)
        torch.backends.cuda.matmul.allow_tf32 = False
    variants.add("cublas-tf32", cublas, c_blas)
    launch, result = tilemm.plan(a, b, kernel="tensorcore-f32", precision="tf32").prepare()
    variants.add("tilemm tf32 (the rung)", launch, result())
    for in_registers, bm, bn, stages in VARIANTS:
        c = torch.empty(n, n, device="cuda")
        variants.add(f"swapped {bn}x{bm}{' in registers' if in_registers else ''} s{stages}",
                     swapped(a, b, c, in_registers, bm, bn, num_stages=stages), c)
    gpu_ladder.time_and_record(variants, args, "tf32_swap_try.py", "cublas-tf32", "vs_cublas_tf32",
                               "worst_of_tf32_bound", n=n)


if __name__ == "__main__":
    main()
