"""Try (issue 9, fp32 SIMT >= 0.9x SGEMM at 4096³): `regblock` with its global loads as 16-byte
vectors (vector.load_vector) against the same program loading element by element, and cuBLAS
SGEMM (TF32 off): float32 and int32 (against CuPy's integer kernel), n x n, interleaved rounds
after a pre-warm, CUDA events, medians, each answer checked against float64 first.

Session 5's profile (ncu_regblock.txt) found the program issue-bound: FFMAs 84% of the
instructions, the rest the K tile's scalar global loads with their 64-bit addresses, the stores
to shared memory, the barrier. A vector load moves four elements for one instruction and one
address.

    PYTHONPATH=src:benchmarks python3 benchmarks/regblock_vector_try.py --out DIR --sizes 4096 8192
"""
from __future__ import annotations

import torch

import tilemm
from tilemm.ladder.simt import launch, s6_regblock
from tilemm.registry import Problem

import gpu_ladder  # noqa: E402  (pre-warm, --out, records)
from regblock_sweep import sass_mix

TILES = dict(block_m=128, block_n=128, block_k=None, thread_m=None, thread_n=8)


def regblock_kernel(dtype: str, widths):
    """The default regblock program, its loads vectors of `widths` (A's, B's) elements."""
    return launch.compiled(s6_regblock.make_regblock, dtype, **TILES, vector_a=widths[0], vector_b=widths[1])


def regblock_launcher(a, b, c, widths):
    dtype = str(a.dtype).removeprefix("torch.")
    kern = regblock_kernel(dtype, widths)
    shape = s6_regblock.shape(Problem(*c.shape, a.shape[1], dtype), **TILES)
    args = [launch_view(x) for x in (a, b, c)]
    return lambda: kern[shape.grid, shape.block](*args)


def launch_view(x):
    from numba import cuda
    return cuda.as_cuda_array(x)


def main():
    args = gpu_ladder.out_and_n(4096, sizes=[4096, 8192], dtypes=["float32", "int32"], rounds=4, per_round=0.3,
                                prewarm=8.0)
    for dtype in args.dtypes:
        for n in map(int, args.sizes):
            if dtype == "float32":
                a, b, want = gpu_ladder.float32_operands(n)
                check = gpu_ladder.relative_error_check(want, 1e-5)
                anchor = "cublas-sgemm"
            else:        # values whose sums float64 holds exactly
                gen = torch.Generator(device="cuda").manual_seed(n)
                a = torch.randint(-100, 101, (n, n), device="cuda", generator=gen, dtype=torch.int32)
                b = torch.randint(-100, 101, (n, n), device="cuda", generator=gen, dtype=torch.int32)
                want = a.double() @ b.double()
                check = gpu_ladder.relative_error_check(want, 0.0)
                anchor = "cupy-int32"
            variants = gpu_ladder.Checked(check, width=28, wrong_ones_out=True)
            c = torch.empty(n, n, device="cuda", dtype=a.dtype)
            cublas, result = tilemm.plan(a, b, kernel="cublas").prepare()
            cublas()
            torch.cuda.synchronize()
            variants.launchers[anchor], variants.values[anchor] = cublas, check(torch.as_tensor(result()))[1]
            width = 16 // a.element_size()
            variants.add("regblock scalar loads", regblock_launcher(a, b, c, (1, 1)), c)
            variants.add("regblock vector loads", regblock_launcher(a, b, c, (width, width)), c)
            variants.add("regblock vector A", regblock_launcher(a, b, c, (width, 1)), c)
            variants.add("regblock vector B", regblock_launcher(a, b, c, (1, width)), c)
            gpu_ladder.time_and_record(variants, args, "regblock_vector_try.py", anchor, "vs_anchor",
                                       "relative_error", dtype=dtype, n=n)
    for widths in ((1, 1), (4, 4)):           # machine code of the float32 programs
        try:
            print("float32 loads", widths, sass_mix(regblock_kernel("float32", widths)), flush=True)
        except Exception as e:                # nvdisasm missing
            print(widths, "no SASS:", e)


if __name__ == "__main__":
    main()
