"""Why `tiled` TILE 32 runs ~7% behind its CUDA C twin: variants of the kernel, timed against the
twin in interleaved rounds (fp32, n = 4096), each answer checked.

    PYTHONPATH=src:benchmarks python3 benchmarks/tiled32_variants.py --out DIR
"""
import argparse
import json
import re
import statistics
from pathlib import Path

import numba
import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds
import cupy as cp
from numba import cuda, uint32, uint64

import gpu_ladder
from tilemm.accuracy import compare
from tilemm.data import operands
from tilemm.ladder.simt import launch as simt_launch, s4_tiled

T = 32
acc = numba.float32


def make(index64, views, cap):
    ix = uint64 if index64 else uint32
    a_view, b_view = "a" in views, views == "ab"   # booleans: the kernel sees constants
    @cuda.jit(**simt_launch.jit_options(32 if cap else None))
    def kernel(a, b, c):
        tile_a = cuda.shared.array((T, T), acc, alignment=16)
        tile_b = cuda.shared.array((T, T), acc, alignment=16)
        m, n, k = uint32(c.shape[0]), uint32(c.shape[1]), uint32(a.shape[1])
        tx, ty = uint32(cuda.threadIdx.x), uint32(cuda.threadIdx.y)
        row = uint32(cuda.blockIdx.y * T + ty)
        col = uint32(cuda.blockIdx.x * T + tx)
        a_row = a[min(row, m - 1)]        # views: one row of A, one column of B
        b_col = b[:, min(col, n - 1)]
        total = acc(0)
        phase = ix(0)
        while phase < k:
            ka = ix(phase + tx)
            if row < m and uint32(ka) < k:
                tile_a[ty, tx] = a_row[ka] if a_view else a[row, ka]
            else:
                tile_a[ty, tx] = acc(0)
            kb = ix(phase + ty)
            if uint32(kb) < k and col < n:
                tile_b[ty, tx] = b_col[kb] if b_view else b[kb, col]
            else:
                tile_b[ty, tx] = acc(0)
            cuda.syncthreads()
            for j in range(T):
                total = acc(total + tile_a[ty, j] * tile_b[j, tx])
            cuda.syncthreads()
            phase = ix(phase + T)
        if row < m and col < n:
            c[row, col] = total
    return kernel


def loop_stats(sass: str) -> dict:
    """Instructions and constant-bank loads (LDC) in the K loop: from the loop's label to its
    backward branch."""
    ins, labels, out = [], {}, {}
    for line in sass.splitlines():
        if line.startswith(".L_x"):
            labels[line.split(":")[0]] = len(ins)
        elif re.match(r"\s+/\*[0-9a-f]{4}\*/", line):
            ins.append(line)
            target = re.search(r"BRA `\((\.L_x_\d+)\)", line)
            if target and target.group(1) in labels and len(ins) - labels[target.group(1)] > 1:
                body = ins[labels[target.group(1)]:]   # (a one-line loop is the end-of-code trap)
                out = {"loop_instructions": len(body), "loop_ldc": sum("LDC" in x for x in body)}
    return out


def linker() -> str:
    """Which PTX compiler numba-cuda's linker uses: nvJitLink or the driver's JIT."""
    try:
        from cuda.core import _linker
        return "nvjitlink" if _linker._decide_nvjitlink_or_driver() is False else "driver"
    except Exception as e:  # noqa: BLE001 - a report, not a decision
        return f"unknown ({type(e).__name__})"


VARIANTS = {"u32": (False, "", True), "u64": (True, "", True), "u64-nocap": (True, "", False),
            "u32-views": (False, "ab", True), "u64-views": (True, "ab", True), "u32-a-view": (False, "a", True),
            "u64-a-view": (True, "a", True)}

ap = argparse.ArgumentParser()
ap.add_argument("--out", type=Path, required=True)
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("--rounds", type=int, default=4)
args = ap.parse_args()
args.out.mkdir(parents=True, exist_ok=True)
n = args.n
a_h, b_h = operands(n, n, n, n, "float32")
a, b = cp.asarray(a_h), cp.asarray(b_h)
lib = gpu_ladder.build_twins(args.out)
launchers, outs = {}, {}
grid, block = ((n + T - 1) // T, (n + T - 1) // T), (T, T)
flat = simt_launch.compiled(s4_tiled.make_tiled_flat, "float32", tile=T)   # the rung's flat form
c_flat = cp.full((n, n), cp.nan, "float32")
a_flat, b_flat, cf = a.reshape(-1), b.reshape(-1), c_flat.reshape(-1)
launchers["flat"] = lambda: flat[grid, block](a_flat, b_flat, cf, uint32(n), uint32(n), uint32(n))
outs["flat"] = c_flat
for name, flags in VARIANTS.items():
    kern = make(*flags)
    c = cp.full((n, n), cp.nan, "float32")
    launchers[name] = (lambda kern=kern, c=c: kern[grid, block](a, b, c))
    outs[name] = c
run, res = tilemm.plan(a, b, kernel="tiled", tile=32).prepare(poison=True)
launchers["rung"], outs["rung"] = run, None
c = cp.full((n, n), cp.nan, "float32")
launchers["cuda-c"], outs["cuda-c"] = gpu_ladder.twin_launcher(lib, "tiled", 32, "float32", a, b, c), c
for name, fn in launchers.items():
    fn()
outs["rung"] = res()
cp.cuda.Device().synchronize()
for name, c in outs.items():
    v = compare(c, a, b, "float32")
    assert v.ok, (name, v.message)
gpu_ladder.prewarm(5)
times = interleaved_rounds(launchers, args.rounds, 0.3)
twin = statistics.median(times["cuda-c"])
stamp = machine.stamp(f"PYTHONPATH=src:benchmarks python3 benchmarks/tiled32_variants.py --n {n} --rounds {args.rounds}")
kernels = {name: make(*flags) for name, flags in VARIANTS.items()}
recs = []
for name, t in times.items():
    med = statistics.median(t)
    rec = {"variant": name, "median_ms": med, "vs_cuda_c": twin / med, "n": n, "linker": linker(), **stamp}
    if name in kernels or name == "flat":   # the machine code the JIT made: loop, constant loads
        kern = flat if name == "flat" else kernels[name]
        if name != "flat":
            kern[grid, block](a, b, outs["cuda-c"])
        sass = kern.inspect_sass()
        sass = sass if isinstance(sass, str) else next(iter(sass.values()))
        regs = kern.get_regs_per_thread()
        rec.update(loop_stats(sass), registers=regs if isinstance(regs, int) else next(iter(regs.values())))
    recs.append(rec)
    print(json.dumps(rec), flush=True)
with open(args.out / "tiled32_variants.jsonl", "a") as f:
    f.writelines(json.dumps(r) + "\n" for r in recs)
