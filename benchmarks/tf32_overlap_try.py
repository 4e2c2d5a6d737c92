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

import torch

import tilemm
from tilemm.timing import graphed
from tilemm.ladder.tensorcore import t4_f32

import gpu_ladder  # noqa: E402  (pre-warm, --out)
from tensorcore_vs_cublas import tf32_checked  # noqa: E402


def overlapped(a, b, c, panels: int, order: str = "copies first", priority: bool = False, block_m=128,
               block_n=256, block_k=32, num_warps=8, num_stages=4):
    """A launcher of c = a @ b (TF32) with B copied K-major a panel of columns at a time on a side
    stream, each panel's product launched once its copy is done. order: "copies first" enqueues
    every copy, then the products; "interleaved" enqueues copy i + 1 just before product i.
    priority: the products run on a stream of the highest priority (forked from and joined back
    to the calling stream), so that the SMs' block scheduler prefers their programs to the copies'."""
    from tilemm.ladder.tensorcore.t4_f32 import panel_bounds, parts_of, product_launch
    config = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, num_warps=num_warps,
                  num_stages=num_stages)
    a_desc, _ = parts_of(a, 1, block_m, block_k)
    copies, products = [], []
    for n0, n1 in panel_bounds(b.shape[1], panels, block_n):
        b_desc, copy = parts_of(b[:, n0:n1].T, 1, block_n, block_k)
        copies.append(copy)
        products.append(product_launch(a_desc, b_desc, c[:, n0:n1], b.shape[0], 1, config))
    side = torch.cuda.Stream()
    low, high = torch.cuda.Stream.priority_range() if hasattr(torch.cuda.Stream, "priority_range") else (0, -1)
    compute = torch.cuda.Stream(priority=high) if priority else None
    ready = [torch.cuda.Event() for _ in copies]
    finished = torch.cuda.Event()

    def copy(i):
        with torch.cuda.stream(side):
            copies[i]()
            ready[i].record(side)

    def go():
        caller = torch.cuda.current_stream()
        main = compute or caller
        side.wait_stream(caller)
        if compute is not None:
            compute.wait_stream(caller)
        if order == "copies first":
            for i in range(len(copies)):
                copy(i)
        else:
            copy(0)
        with torch.cuda.stream(main):
            for i, product in enumerate(products):
                if order != "copies first" and i + 1 < len(copies):
                    copy(i + 1)
                main.wait_event(ready[i])
                product()
            finished.record(main)
        caller.wait_event(finished)
    return go


def main():
    args = gpu_ladder.out_and_n(4096, rounds=4, per_round=0.3, prewarm=8.0, panels=["2", "8"], graphs=False)
    n = args.n
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(n, n, device="cuda", generator=gen)
    b = torch.randn(n, n, device="cuda", generator=gen)
    variants = gpu_ladder.Checked(lambda c: tf32_checked(c, a, b), width=32)
    add = variants.add

    c_blas = torch.empty(n, n, device="cuda")

    def cublas():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.matmul(a, b, out=c_blas)
        torch.backends.cuda.matmul.allow_tf32 = False
    add("cublas-tf32", cublas, c_blas)
    launch, result = tilemm.plan(a, b, kernel="tensorcore-f32", precision="tf32").prepare()
    add("tilemm tf32 (as it is)", launch, result())
    for panels in args.panels:
        for order in ("copies first", "interleaved"):
            for priority in (False, True):
                c = torch.empty(n, n, device="cuda")
                add(f"{panels} panels, {order}{', high priority' if priority else ''}",
                    overlapped(a, b, c, int(panels), order, priority), c)
    launch, result = tilemm.plan(a, b, kernel="tensorcore-f32", precision="tf32", copy_panels=1).prepare()
    add("tilemm tf32, one copy", launch, result())
    c = torch.empty(n, n, device="cuda")
    b_k_major, fill = t4_f32.parts_of(b.T, 1, 256, 32)
    fill()                                                        # copied once, outside the timing
    a_desc, _ = t4_f32.parts_of(a, 1, 128, 32)

    def product_alone():
        from tilemm.ladder.tensorcore.t4_f32_kernel import tf32_matmul
        tf32_matmul[(-(-n // 128) * -(-n // 256),)](a_desc, b_k_major, c, n, n, n, c.stride(0), c.stride(1),
                                                    PARTS=1, CHUNK=1, BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=8,
                                                    num_warps=8, num_stages=4)
    add("product alone (B copied before)", product_alone, c)
    launchers = variants.launchers
    if args.graphs:      # the launches captured ten at a time in a CUDA graph: the GPU's time alone
        launchers = {label: graphed(launch) for label, launch in launchers.items()}
    gpu_ladder.time_and_record(variants, args, "tf32_overlap_try.py", "cublas-tf32", "vs_cublas_tf32",
                               "worst_of_tf32_bound", launchers=launchers, n=n, graphs=args.graphs)


if __name__ == "__main__":
    main()
