"""Try (issue 9, 3xTF32 at 2x SGEMM): add the tensor cores' sums into the float32 total once a
chunk of K steps, not once a step.

The rung's 3xTF32 program adds each K step's three products into the running float32 sum, so
the tensor cores' asynchronous pipeline drains every step (ncu at 4096³: tensor pipe busy 51%,
39% of the warps' cycles waiting at a barrier; h100-2026-11-22-s5/ncu_f32.txt). Here the K loop
is two loops: an inner one over CHUNK steps, pipelined by Triton, whose products chain on the
tensor cores (the big a_hi b_hi into one accumulator, the small cross terms into another), and
an outer one that adds the chunk into the float32 total — what the rung now does
(t4_f32_kernel.tf32_matmul, timed here with several chunk lengths), and a form of it with A's
split done in registers. Each variant's error against float64 (max |C - C64| / max |C64|, random
normal data) beside cuBLAS SGEMM's (TF32 off) and the rung's; interleaved rounds, CUDA events,
medians.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/f32_chunk_try.py --out DIR --n 4096
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

import tilemm
from tilemm.ladder.tensorcore.t1_blocked_kernel import store_tile, tile_position
from tilemm.ladder.tensorcore import t4_f32
from tilemm.ladder.tensorcore.t4_f32 import parts_of

import gpu_ladder  # noqa: E402  (pre-warm, --out/--n)


@triton.jit
def tf32x3_a_in_registers(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn, CHUNK: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr):
    """The chunked program with A's split done in registers: a_desc is A itself (float32, K
    contiguous), each tile split into hi and lo as split_tf32 does, so A has no split pass and
    one tile a step in shared memory instead of two."""
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(0, K, CHUNK * BLOCK_K):
        big = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(c0, tl.minimum(c0 + CHUNK * BLOCK_K, K), BLOCK_K):
            a = a_desc.load([off_m, k0])
            bits = a.to(tl.int32, bitcast=True)
            finite = (bits & 0x7F800000) != 0x7F800000
            rounded = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
            truncated = (bits & -8192).to(tl.float32, bitcast=True)
            a_hi = tl.where(finite, tl.where(tl.abs(a) < 3.0e38, rounded, truncated), a)
            a_lo = tl.where(finite, a - a_hi, 0.0)
            b_hi = b_desc.load([off_n, k0]).T
            b_lo = b_desc.load([N + off_n, k0]).T
            small = tl.dot(a_lo, b_hi, small, input_precision="tf32")
            small = tl.dot(a_hi, b_lo, small, input_precision="tf32")
            big = tl.dot(a_hi, b_hi, big, input_precision="tf32")
        acc += big + tl.where(tl.abs(small) < float("inf"), small, 0.0)
    store_tile(c_ptr, acc, off_m, off_n, M, N, stride_cm, stride_cn, False)


def a_in_registers(a, b, c, chunk, block_m, block_n, block_k=32, num_warps=8, num_stages=3):
    from triton.tools.tensor_descriptor import TensorDescriptor
    m, k = a.shape
    n = b.shape[1]
    a_desc = TensorDescriptor.from_tensor(a, [block_m, block_k])
    b_desc, b_fill = parts_of(b.T, 2, block_n, block_k)
    grid = (-(-m // block_m) * -(-n // block_n),)

    def go():
        b_fill()
        tf32x3_a_in_registers[grid](a_desc, b_desc, c, m, n, k, c.stride(0), c.stride(1), CHUNK=chunk,
                                    BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
                                    num_warps=num_warps, num_stages=num_stages)
    return go


def chunked(a, b, c, chunk, block_m, block_n, block_k=32, num_warps=8, num_stages=3):
    """The rung's program (t4_f32_kernel.tf32_matmul) with chunks of `chunk` K steps and these tiles."""
    from tilemm.ladder.tensorcore.t4_f32 import product_launch
    a_desc, a_fill = parts_of(a, 2, block_m, block_k)
    b_desc, b_fill = parts_of(b.T, 2, block_n, block_k)
    config = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, num_warps=num_warps,
                  num_stages=num_stages)
    kept = t4_f32.CHUNK_STEPS, t4_f32.MIN_CHUNKS
    t4_f32.CHUNK_STEPS, t4_f32.MIN_CHUNKS = chunk, 1
    try:
        product = product_launch(a_desc, b_desc, c, a.shape[1], 2, config)
    finally:
        t4_f32.CHUNK_STEPS, t4_f32.MIN_CHUNKS = kept

    def go():
        a_fill()
        b_fill()
        product()
    return go


# run 1 (the rung still added every K step) also timed two accumulators (the small products in the
# big one's) and 128 x 256 tiles, with a copy of the program since folded into the rung: its
# records say so; the program is in git's history
VARIANTS = [(4, 128, 128, 3), (8, 128, 128, 3), (16, 128, 128, 3)]  # (chunk, block_m, block_n, stages)
# run 2: A's split done in registers beside the rung (which now chunks)
A_IN_REGISTERS = [(16, 128, 128, 3), (16, 128, 128, 4), (12, 128, 128, 4)]


def main():
    args = gpu_ladder.out_and_n(4096, rounds=4, per_round=0.3, prewarm=8.0)
    n = args.n
    a, b, ref = gpu_ladder.float32_operands(n)
    variants = gpu_ladder.Checked(gpu_ladder.relative_error_check(ref, 1e-4))
    c_sgemm = torch.empty_like(a)
    variants.add("cublas-sgemm", lambda: torch.matmul(a, b, out=c_sgemm), c_sgemm)
    launch, result = tilemm.plan(a, b, kernel="tensorcore-f32").prepare()
    variants.add("3xtf32 (the rung)", launch, result())
    for chunk, bm, bn, stages in VARIANTS:
        c = torch.empty_like(a)
        variants.add(f"chunk {chunk} {bm}x{bn} s{stages}", chunked(a, b, c, chunk, bm, bn, num_stages=stages), c)
    for chunk, bm, bn, stages in A_IN_REGISTERS:
        c = torch.empty_like(a)
        variants.add(f"A in registers, chunk {chunk} {bm}x{bn} s{stages}",
                     a_in_registers(a, b, c, chunk, bm, bn, num_stages=stages), c)
    gpu_ladder.time_and_record(variants, args, "f32_chunk_try.py", "cublas-sgemm", "vs_sgemm", "relative_error", n=n)


if __name__ == "__main__":
    main()
