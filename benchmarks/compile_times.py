"""First-call (compile) time of each SIMT rung and dtype; run it twice to see the disk cache.

    PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/nbcache python3 benchmarks/compile_times.py --out DIR --label cold
"""
import argparse
import json
import time
from pathlib import Path


import tilemm
from tilemm import machine
from tilemm.data import operands

import cupy as cp  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--out", type=Path, required=True)
ap.add_argument("--label", required=True)
args = ap.parse_args()
t_import = time.perf_counter()
rungs = [k.name for k in tilemm.kernels("cuda") if k.backend == "numba-cuda"]
rows = []
for dtype in ("float32", "int32", "float64", "int64"):
    a_h, b_h = operands(1, 64, 64, 64, dtype)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    for kernel in rungs:
        t0 = time.perf_counter()
        tilemm.matmul(a, b, kernel=kernel)
        cp.cuda.Device().synchronize()
        rows.append({"kernel": kernel, "dtype": dtype, "label": args.label, "first_call_s": time.perf_counter() - t0,
                     **machine.stamp(f"PYTHONPATH=src NUMBA_CACHE_DIR=/tmp/nbc python3 benchmarks/compile_times.py "
                                     f"--label {args.label}")})
        print(f"{args.label:5} {kernel:14} {dtype:8} {rows[-1]['first_call_s']:.3f} s", flush=True)
args.out.mkdir(parents=True, exist_ok=True)
with open(args.out / "compile_times.jsonl", "a") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)

# The machine code of three rungs (float32), to read what the compiler made of the Python.
from tilemm.ladder.simt import launch, r03_naive, r06_tiled, r08_regblock  # noqa: E402

with open(args.out / f"asm_{args.label}.txt", "w") as f:
    for name, factory, params in [("naive", r03_naive.make_naive, {}), ("tiled16", r06_tiled.make_tiled, {"tile": 16}),
                                  ("tiled32", r06_tiled.make_tiled, {"tile": 32}),
                                  ("regblock", r08_regblock.make_regblock,
                                   dict(block_m=128, block_n=128, block_k=16, thread_m=8, thread_n=8))]:
        kern = launch.compiled(factory, "float32", **params)
        for sig, ptx in kern.inspect_asm().items():
            counts = {op: ptx.count(op) for op in ("ld.global", "ld.shared", "ld.shared.v4", "st.shared", "ld.local", "st.local",
                                                   "fma.rn.f32", "selp", "setp", "bar.sync", "mul.wide")}
            print(name, counts, flush=True)
            f.write(f"===== {name} {sig} PTX\n{ptx}\n")
        try:
            for sig, sass in kern.inspect_sass().items():
                f.write(f"===== {name} {sig} SASS\n{sass}\n")
        except Exception as e:  # nvdisasm missing: the PTX still tells most
            f.write(f"(no SASS: {e})\n")
