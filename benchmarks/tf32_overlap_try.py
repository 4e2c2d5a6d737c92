"""Try (issue 9, TF32 at 0.9x cuBLAS TF32): hide B's K-major copy behind the product.

At 4096³ (ncu, h100-2026-11-22-s5/ncu_f32.txt) the TF32 program takes 406 µs where cuBLAS's
takes 408 µs, but B must first be written K-major (wgmma reads 32-bit operands K-major only):
42.5 µs, near the HBM bound. Here B is copied in column panels on a second stream while the
product runs on the panels already copied (the copy needs little shared memory and fits on the
SMs beside the product's programs). Variants: the rung as it is, panels 2 / 4 / 8, and the
product alone on a B copied beforehand (the bound for any such scheme); cuBLAS TF32 the anchor.
Interleaved rounds, CUDA events on the calling stream, medians; every answer checked against
TF32's bound first.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/tf32_overlap_try.py --out DIR --n 4096
"""
from __future__ import annotations

import json
import statistics

import torch

import tilemm
from tilemm import machine
from tilemm.bench.timing import interleaved_rounds
from tilemm.ladder import _tensorcore_support as support
from tilemm.ladder.tensorcore import t4_f32

import gpu_ladder  # noqa: E402  (pre-warm, --out)
from tensorcore_vs_cublas import tf32_checked  # noqa: E402


def overlapped(a, b, c, panels: int, block_m=128, block_n=256, block_k=32, num_warps=8, num_stages=4):
    """A launcher of c = a @ b (TF32) with B copied K-major a panel of columns at a time on a side
    stream, each panel's product launched on the calling stream once its copy is done."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    from tilemm.ladder.tensorcore.t4_f32_kernel import split_tf32, tf32_matmul
    m, k = a.shape
    n = b.shape[1]
    k_pad = -(-k // 4) * 4
    width = -(-n // panels // block_n) * block_n          # whole tiles a panel
    bounds = [(n0, min(n0 + width, n)) for n0 in range(0, n, width)]
    a_desc = TensorDescriptor.from_tensor(a, [block_m, block_k])
    side = torch.cuda.Stream()

    def go():
        main = torch.cuda.current_stream()
        bt = torch.empty((n, k_pad), dtype=torch.float32, device=a.device)   # allocated on main
        side.wait_stream(main)
        done = []
        with torch.cuda.stream(side):
            for n0, n1 in bounds:
                x = b[:, n0:n1].T
                grid = (-(-(n1 - n0) // support.SPLIT_BLOCK), -(-k_pad // support.SPLIT_BLOCK))
                split_tf32[grid](x, bt[n0:n1], n1 - n0, k, k_pad, x.stride(0), x.stride(1), PARTS=1,
                                 BLOCK_R=support.SPLIT_BLOCK, BLOCK_C=support.SPLIT_BLOCK)
                ev = torch.cuda.Event()
                ev.record(side)
                done.append(ev)
        for (n0, n1), ev in zip(bounds, done):
            main.wait_event(ev)
            b_desc = TensorDescriptor.from_tensor(bt[n0:n1], [block_n, block_k])
            cp = c[:, n0:n1]
            grid = (-(-m // block_m) * -(-(n1 - n0) // block_n),)
            tf32_matmul[grid](a_desc, b_desc, cp, m, n1 - n0, k, cp.stride(0), cp.stride(1), PARTS=1,
                              BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
                              num_warps=num_warps, num_stages=num_stages)
    return go


def main():
    args = gpu_ladder.out_and_n(4096, rounds=4, per_round=0.3, prewarm=8.0)
    n = args.n
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(n, n, device="cuda", generator=gen)
    b = torch.randn(n, n, device="cuda", generator=gen)
    launchers, outputs = {}, {}

    def add(label, launch, c):
        c.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        ok, worst = tf32_checked(c, a, b)
        print(f"{label:28} checked: {ok} (worst error {worst:.2f} of TF32's bound)", flush=True)
        assert ok, label
        launchers[label], outputs[label] = launch, worst

    c_blas = torch.empty(n, n, device="cuda")

    def cublas():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.matmul(a, b, out=c_blas)
        torch.backends.cuda.matmul.allow_tf32 = False
    add("cublas-tf32", cublas, c_blas)
    launch, result = tilemm.plan(a, b, kernel="tensorcore-f32", precision="tf32").prepare()
    add("tilemm tf32 (as it is)", launch, result())
    for panels in (2, 4, 8):
        c = torch.empty(n, n, device="cuda")
        add(f"overlap {panels} panels", overlapped(a, b, c, panels), c)
    c = torch.empty(n, n, device="cuda")
    b_k_major = t4_f32.parts_of(b.T, 1, 256, 32)                 # copied once, outside the timing
    a_desc = t4_f32.parts_of(a, 1, 128, 32)

    def product_alone():
        from tilemm.ladder.tensorcore.t4_f32_kernel import tf32_matmul
        tf32_matmul[(-(-n // 128) * -(-n // 256),)](a_desc, b_k_major, c, n, n, n, c.stride(0), c.stride(1),
                                                    PARTS=1, BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=8,
                                                    num_warps=8, num_stages=4)
    add("product alone (B copied before)", product_alone, c)
    gpu_ladder.prewarm(args.prewarm)
    times = interleaved_rounds(launchers, args.rounds, args.per_round)
    base = statistics.median(times["cublas-tf32"])
    stamp = machine.stamp(machine.command_line("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 "
                                               "benchmarks/tf32_overlap_try.py", args))
    with open(args.out / "tf32_overlap_try.jsonl", "a") as f:
        for label, ts in times.items():
            med = statistics.median(ts)
            rec = {"variant": label, "n": n, "median_ms": med, "vs_cublas_tf32": base / med,
                   "worst_of_tf32_bound": outputs[label], "launches": len(ts), **stamp}
            print(f"{label:32} {med * 1e3:8.1f} us   vs cuBLAS TF32 {base / med:5.3f}", flush=True)
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
