"""Try (issue 9, 3xTF32 at 2x SGEMM): add the tensor cores' sums into the float32 total once a
chunk of K steps, not once a step.

The rung's 3xTF32 program adds each K step's three products into the running float32 sum, so
the tensor cores' asynchronous pipeline drains every step (ncu at 4096³: tensor pipe busy 51%,
39% of the warps' cycles waiting at a barrier; h100-2026-11-22-s5/ncu_f32.txt). Here the K loop
is two loops: an inner one over CHUNK steps, pipelined by Triton, whose products chain on the
tensor cores (the big a_hi b_hi into one accumulator, the small cross terms into another), and
an outer one that adds the chunk into the float32 total. SPLIT_SMALL=False puts all three
products into one accumulator (two accumulators' registers instead of three). Each variant's
error against float64 (max |C - C64| / max |C64|, random normal data) beside cuBLAS SGEMM's
(TF32 off) and the rung's; interleaved rounds, CUDA events, medians.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/f32_chunk_try.py --out DIR --n 4096
"""
from __future__ import annotations

import json
import statistics

import torch
import triton
import triton.language as tl

import tilemm
from tilemm import machine
from tilemm.bench.timing import interleaved_rounds
from tilemm.ladder.tensorcore.t1_blocked_kernel import tile_position
from tilemm.ladder.tensorcore.t4_f32 import parts_of

import gpu_ladder  # noqa: E402  (pre-warm, --out/--n)


@triton.jit
def tf32x3_chunked(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn, CHUNK: tl.constexpr,
                   SPLIT_SMALL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(0, K, CHUNK * BLOCK_K):
        big = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(c0, tl.minimum(c0 + CHUNK * BLOCK_K, K), BLOCK_K):
            a_hi = a_desc.load([off_m, k0])
            b_hi = b_desc.load([off_n, k0]).T
            a_lo = a_desc.load([M + off_m, k0])
            b_lo = b_desc.load([N + off_n, k0]).T
            if SPLIT_SMALL:
                small = tl.dot(a_lo, b_hi, small, input_precision="tf32")
                small = tl.dot(a_hi, b_lo, small, input_precision="tf32")
            else:
                big = tl.dot(a_lo, b_hi, big, input_precision="tf32")
                big = tl.dot(a_hi, b_lo, big, input_precision="tf32")
            big = tl.dot(a_hi, b_hi, big, input_precision="tf32")
        if SPLIT_SMALL:
            acc += big + tl.where(tl.abs(small) < float("inf"), small, 0.0)
        else:
            acc += big
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


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
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


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


def chunked(a, b, c, chunk, split_small, block_m, block_n, block_k=32, num_warps=8, num_stages=2):
    m, k = a.shape
    n = b.shape[1]
    a_desc, a_fill = parts_of(a, 2, block_m, block_k)
    b_desc, b_fill = parts_of(b.T, 2, block_n, block_k)
    grid = (-(-m // block_m) * -(-n // block_n),)

    def go():
        a_fill()
        b_fill()
        tf32x3_chunked[grid](a_desc, b_desc, c, m, n, k, c.stride(0), c.stride(1), CHUNK=chunk,
                             SPLIT_SMALL=split_small, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                             GROUP_M=8, num_warps=num_warps, num_stages=num_stages)
    return go


VARIANTS = [  # (chunk, split_small, block_m, block_n, num_stages)
    (4, True, 128, 128, 3), (8, True, 128, 128, 3), (16, True, 128, 128, 3),
    (8, False, 128, 128, 3), (8, False, 128, 256, 2), (16, False, 128, 256, 2), (8, True, 128, 256, 2),
]
# run 2: the rung now chunks (16 steps, 128 x 128, 3 stages); A split in registers beside it
A_IN_REGISTERS = [  # (chunk, block_m, block_n, num_stages)
    (16, 128, 128, 3), (16, 128, 128, 4), (12, 128, 128, 4)]


def main():
    args = gpu_ladder.out_and_n(4096, rounds=4, per_round=0.3, prewarm=8.0)
    n = args.n
    gen = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=gen)
    b = torch.randn(n, n, device="cuda", generator=gen)
    ref = a.double() @ b.double()
    torch.backends.cuda.matmul.allow_tf32 = False                         # true SGEMM
    launchers, errors = {}, {}

    def add(label, launch, c):
        c.fill_(float("nan"))
        try:
            launch()
            torch.cuda.synchronize()
        except Exception as e:                # a variant that does not compile or fit: say so, go on
            print(f"{label:40} FAILED: {type(e).__name__}: {str(e)[:200]}", flush=True)
            return
        err = float((c.double() - ref).abs().max() / ref.abs().max())
        print(f"{label:40} relative error {err:.2e}", flush=True)
        assert err < 1e-4, label
        launchers[label], errors[label] = launch, err

    c_sgemm = torch.empty_like(a)
    add("cublas-sgemm", lambda: torch.matmul(a, b, out=c_sgemm), c_sgemm)
    launch, result = tilemm.plan(a, b, kernel="tensorcore-f32").prepare()
    add("3xtf32 (the rung)", launch, result())
    for chunk, bm, bn, stages in A_IN_REGISTERS:
        c = torch.empty_like(a)
        add(f"A in registers, chunk {chunk} {bm}x{bn} s{stages}", a_in_registers(a, b, c, chunk, bm, bn,
                                                                                 num_stages=stages), c)
    gpu_ladder.prewarm(args.prewarm)
    times = interleaved_rounds(launchers, args.rounds, args.per_round)
    base = statistics.median(times["cublas-sgemm"])
    stamp = machine.stamp(machine.command_line("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 "
                                               "benchmarks/f32_chunk_try.py", args))
    with open(args.out / "f32_chunk_try.jsonl", "a") as f:
        for label, ts in times.items():
            med = statistics.median(ts)
            rec = {"variant": label, "n": n, "median_ms": med, "vs_sgemm": base / med,
                   "relative_error": errors[label], "launches": len(ts), **stamp}
            print(f"{label:40} {med * 1e3:9.1f} us   vs SGEMM {base / med:5.3f}   error {errors[label]:.1e}", flush=True)
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
