"""Try (issue 9, fp8 e4m3 8192³ at 1.0x torch._scaled_mm without fast accumulation): add the
tensor cores' fp8 sums into the float32 total once a chunk of K steps.

Hopper adds fp8 products into its accumulator with fewer bits than float32 keeps; cuBLAS (and
`scaled_matmul(fast_accum=False)`) moves the sum into float32 every so often. tilemm does that
every K step of 128 with Triton's max_num_imprecise_acc, which waits for the tensor cores each
step: 0.86x `_scaled_mm`. Here the K loop is two loops, an inner one over CHUNK steps whose
products chain on the tensor cores (pipelined by Triton) and an outer one adding each chunk into
float32, as the 3xTF32 program does. CHUNK = 1 adds every step.

Speed: 8192³, bfloat16 out, A row-major, B given as (N, K).T, against `_scaled_mm` as called by
default (use_fast_accum=False); interleaved rounds, CUDA events, medians, each answer checked
first. Error: float32 out (so the accumulation shows, not bfloat16's rounding), M = N = 2048,
K = 8192, against a float64 product of the same fp8 values, on normal data and on positive data
(uniform in [0, 1): the sums grow with K, where a short accumulator loses most), beside
`_scaled_mm` with and without fast accumulation.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_chunk_try.py --out DIR
"""
from __future__ import annotations

import json

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import tilemm
from tilemm.ladder.tensorcore.t1_blocked_kernel import store_tile, tile_position

import gpu_ladder  # noqa: E402  (pre-warm, --out/--n)


@triton.jit
def fp8_chunked(a_desc, b_desc, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K, stride_cm, stride_cn,
                CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr):
    off_m, off_n = tile_position(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(0, K, CHUNK * BLOCK_K):
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(c0, tl.minimum(c0 + CHUNK * BLOCK_K, K), BLOCK_K):
            part = tl.dot(a_desc.load([off_m, k0]), b_desc.load([off_n, k0]).T, part)
        acc += part
    store_tile(c_ptr, acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr)), off_m, off_n, M, N, stride_cm, stride_cn,
               False)


def chunked(a, b_t, c, scale, chunk, block_m, block_n, block_k=128, num_warps=8, num_stages=4):
    """c = scale^2 a @ b_t.T; b_t (N, K) K-major."""
    m, k = a.shape
    n = b_t.shape[0]
    a_desc = TensorDescriptor.from_tensor(a, [block_m, block_k])
    b_desc = TensorDescriptor.from_tensor(b_t, [block_n, block_k])
    grid = (-(-m // block_m) * -(-n // block_n),)
    return lambda: fp8_chunked[grid](a_desc, b_desc, c, scale, scale, m, n, k, c.stride(0), c.stride(1),
                                     CHUNK=chunk, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
                                     num_warps=num_warps, num_stages=num_stages)


VARIANTS = [  # (chunk, block_m, block_n, num_warps, num_stages)
    (1, 128, 128, 8, 4), (2, 128, 128, 8, 4), (4, 128, 128, 8, 4), (8, 128, 128, 8, 4),
    (4, 128, 128, 8, 5), (4, 128, 256, 8, 3)]


def errors(out):
    """Max relative error against float64 (float32 out) of each mode, on normal and positive data."""
    res = {}
    one = torch.tensor(1.0, device="cuda")
    for data in ("normal", "positive"):
        g = torch.Generator(device="cuda").manual_seed(7)
        make = (lambda *s: torch.randn(*s, generator=g, device="cuda")) if data == "normal" else \
            (lambda *s: torch.rand(*s, generator=g, device="cuda"))
        a = make(2048, 8192).to(torch.float8_e4m3fn)
        b_t = make(2048, 8192).to(torch.float8_e4m3fn)
        ref = a.double() @ b_t.double().T
        c = torch.empty(2048, 2048, device="cuda")

        def err(x):
            return float((x.double() - ref).abs().max() / ref.abs().max())
        res[f"{data}: _scaled_mm"] = err(torch._scaled_mm(a, b_t.T, one, one, out_dtype=torch.float32))
        res[f"{data}: _scaled_mm fast"] = err(torch._scaled_mm(a, b_t.T, one, one, out_dtype=torch.float32,
                                                               use_fast_accum=True))
        res[f"{data}: scaled_matmul"] = err(tilemm.scaled_matmul(a, b_t.T, one, one, out_dtype="float32"))
        res[f"{data}: scaled_matmul fast"] = err(tilemm.scaled_matmul(a, b_t.T, one, one, out_dtype="float32",
                                                                      fast_accum=True))
        for chunk in (1, 2, 4, 8):
            chunked(a, b_t, c, one, chunk, 128, 128)()
            res[f"{data}: chunk {chunk}"] = err(c)
    for key, v in res.items():
        print(f"{key:32} error {v:.2e}", flush=True)
    with open(out / "fp8_chunk_try.jsonl", "a") as f:
        f.write(json.dumps({"errors_m2048_n2048_k8192_float32_out": res, **STAMP}) + "\n")


STAMP = {}


def main():
    args = gpu_ladder.out_and_n(8192, rounds=4, per_round=0.3, prewarm=8.0)
    STAMP.update(gpu_ladder.try_stamp("fp8_chunk_try.py", args))
    errors(args.out)
    n = args.n
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, generator=g, device="cuda").to(torch.float8_e4m3fn)
    b_t = torch.randn(n, n, generator=g, device="cuda").to(torch.float8_e4m3fn)
    scale = torch.tensor(0.5, device="cuda")
    ref = (a.double() @ b_t.double().T) * 0.25
    variants = gpu_ladder.Checked(gpu_ladder.relative_error_check(ref, 1e-2))
    c0 = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    variants.add("_scaled_mm", lambda: torch._scaled_mm(a, b_t.T, scale, scale, out_dtype=torch.bfloat16, out=c0),
                 c0)
    c1 = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    variants.add("scaled_matmul (rung)", lambda: tilemm.scaled_matmul(a, b_t.T, scale, scale, out=c1), c1)
    for chunk, bm, bn, warps, stages in VARIANTS:
        c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
        variants.add(f"chunk {chunk} {bm}x{bn} w{warps} s{stages}",
                     chunked(a, b_t, c, scale, chunk, bm, bn, num_warps=warps, num_stages=stages), c)
    gpu_ladder.time_and_record(variants, args, "fp8_chunk_try.py", "_scaled_mm", "vs_scaled_mm", "relative_error", n=n)


if __name__ == "__main__":
    main()
