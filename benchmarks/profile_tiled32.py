"""One launch each of `tiled` TILE 32 (numba-cuda) and its CUDA C twin at n = 4096, for ncu and SASS.

    PYTHONPATH=src ncu --metrics ... python3 benchmarks/profile_tiled32.py --out DIR
"""
import argparse
from pathlib import Path

import tilemm
import cupy as cp
from tilemm.ladder.simt import launch as simt_launch, r06_tiled

import gpu_ladder

ap = argparse.ArgumentParser()
ap.add_argument("--out", type=Path, required=True)
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("--dtype", default="float32")
args = ap.parse_args()
args.out.mkdir(parents=True, exist_ok=True)
n = args.n
a = cp.random.standard_normal((n, n)).astype(args.dtype)
b = cp.random.standard_normal((n, n)).astype(args.dtype)
c = cp.empty((n, n), args.dtype)
lib = gpu_ladder.build_twins(args.out)
plan = tilemm.plan(a, b, kernel="tiled", tile=32)
run, _ = plan.prepare()
run()
gpu_ladder.twin_launcher(lib, "tiled", 32, args.dtype, a, b, c)()
cp.cuda.Device().synchronize()
kernel = simt_launch.compiled(r06_tiled.make_tiled, args.dtype, tile=32)
for sig, sass in kernel.inspect_sass().items():
    (args.out / "tiled32_numba.sass").write_text(sass)
