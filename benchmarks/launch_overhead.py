"""Where the CPU time of one `tensorcore` launch goes (issue 9: at 1000³ a launch costs more CPU
time than the GPU needs, so its time is the launch's).

    PYTHONPATH=src python3 benchmarks/launch_overhead.py --out DIR

Microseconds of CPU per call, layer by layer (bf16, 1000³, row-major): cuBLAS through torch,
tilemm's prepared plan (its launcher bound once), tilemm.matmul, the rung's launch(), the
Triton program with its descriptors made each call, and with them made once; then a cProfile
of the prepared plan's calls.
"""
from __future__ import annotations

import cProfile
import io
import json
import pstats

import torch

import tilemm
from tilemm import machine
from tilemm.timing import launch_overhead_us
from tilemm.ladder.tensorcore import r10_tensorcore
from tilemm.ladder.tensorcore.r10_tensorcore_kernel import matmul_tma

import gpu_ladder  # noqa: E402  (--out/--n)


def bf16_program(n: int):
    """(args, n, a, b): bf16 operands n x n, the rung's default tiles at that size, and
    args(c, a_desc, b_desc) -> (positional, keyword) arguments of matmul_tma[grid] writing c
    (descriptors of a and b made once when not given)."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    tiles = r10_tensorcore.resolve_tiles(n, n, n, dict(block_m=None, block_n=None, block_k=None, num_warps=None,
                                                num_stages=None))
    descriptors = (r10_tensorcore.descriptor(a, tiles["block_m"], tiles["block_k"])[0],
                   r10_tensorcore.descriptor(b, tiles["block_k"], tiles["block_n"])[0])

    def args(c, a_desc=None, b_desc=None):
        a_desc, b_desc = (a_desc or descriptors[0]), (b_desc or descriptors[1])
        return ((a_desc, b_desc, c, n, n, n, c.stride(0), c.stride(1)),
                dict(A_T=False, B_T=False, BLOCK_M=tiles["block_m"], BLOCK_N=tiles["block_n"],
                     BLOCK_K=tiles["block_k"], GROUP_M=8, UPCAST=False, num_warps=tiles["num_warps"],
                     num_stages=tiles["num_stages"]))
    args.grid = (-(-n // tiles["block_m"]) * -(-n // tiles["block_n"]),)
    args.tiles = tiles
    return args, a, b


def main():
    args = gpu_ladder.out_and_n(1000)
    n = args.n
    program_args, a, b = bf16_program(n)
    tiles, grid = program_args.tiles, program_args.grid
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    launch, _ = tilemm.plan(a, b, kernel="tensorcore").prepare()

    positional, keywords = program_args(c)

    def raw():
        matmul_tma[grid](*positional, **keywords)

    def raw_with_descriptors():
        p, kw = program_args(c, r10_tensorcore.descriptor(a, tiles["block_m"], tiles["block_k"])[0],
                             r10_tensorcore.descriptor(b, tiles["block_k"], tiles["block_n"])[0])
        matmul_tma[grid](*p, **kw)
    layers = {
        "cublas (torch.matmul out=)": lambda: torch.matmul(a, b, out=c),
        "tilemm plan launch": launch,
        "r10_tensorcore.launch (persistent)": lambda: r10_tensorcore.launch(a, b, c, group_m=8, **tiles),
        "tilemm.matmul(a, b, kernel='tensorcore')": lambda: tilemm.matmul(a, b, kernel="tensorcore"),
        "triton program, descriptors made each call": raw_with_descriptors,
        "triton program, descriptors made once": raw,
    }
    rec = {"n": n, "tiles": tiles, **machine.stamp(f"PYTHONPATH=src python3 benchmarks/launch_overhead.py --n {n}")}
    for label, fn in layers.items():
        fn()
        us = min(launch_overhead_us(fn, calls=200) for _ in range(5))
        rec[label] = us
        print(f"{label:48} {us:7.1f} us", flush=True)
    a8 = torch.randn(4096, 4096, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(4096, 4096, device="cuda").to(torch.float8_e4m3fn).T
    one = torch.tensor(1.0, device="cuda")
    fp8 = {"torch._scaled_mm (4096, fp8)": lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16),
           "tilemm.scaled_matmul (4096, fp8)": lambda: tilemm.scaled_matmul(a8, b8, one, one)}
    for label, fn in fp8.items():
        fn()
        us = min(launch_overhead_us(fn, calls=50) for _ in range(3))
        rec[label] = us
        print(f"{label:48} {us:7.1f} us", flush=True)
    profiles = {"prepared plan": launch, "tilemm.matmul": layers["tilemm.matmul(a, b, kernel='tensorcore')"],
                "scaled_matmul": fp8["tilemm.scaled_matmul (4096, fp8)"]}
    text = io.StringIO()
    for label, fn in profiles.items():
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        text.write(f"=== {label}: 200 calls\n")
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    (args.out / "launch_overhead_profile.txt").write_text(text.getvalue())
    with open(args.out / "launch_overhead.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
