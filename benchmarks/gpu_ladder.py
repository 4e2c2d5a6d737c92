"""Every SIMT rung on a GPU against its CUDA C twin and cuBLAS.

    PYTHONPATH=src python3 benchmarks/gpu_ladder.py --out DIR [--sizes 2048 4096] [--dtypes float32 int32]

The twins (benchmarks/twins/twins.cu, the seeds' kernels in CUDA C) are built with nvcc -O3
for sm_90 and called through ctypes on the same CuPy buffers as the Python rungs. Timing:
a pre-warm of the GPU, then interleaved rounds (the order rotated each round), each launch
timed with CUDA events, the median over all launches of a variant. Every variant's answer is
checked against a float64 (or exact integer) reference before it is timed.
"""
from __future__ import annotations

import ctypes
import statistics
import subprocess
import time
from pathlib import Path

import tilemm  # first: its shim lets numba-cuda import under NumPy 2.5
from tilemm.numerics.accuracy import compare
from tilemm.system.timing import interleaved_rounds, launch_overhead_us
from tilemm.numerics.data import operands

import harness

HERE = Path(__file__).parent

# (label, kernel, params, twin): the twin runs the same launch shape in CUDA C.
VARIANTS = [
    ("naive", "naive", {"block": 16}, ("naive", 16)),
    ("naive-global", "naive-global", {"block": 16}, None),
    ("uncoalesced", "uncoalesced", {"block": 16}, None),
    ("tiled16", "tiled", {"tile": 16}, ("tiled", 16)),
    ("tiled32", "tiled", {"tile": 32}, ("tiled", 32)),
    ("rect32x2", "rect", {"tile": 32, "f": 2}, None),
    ("rect16x4", "rect", {"tile": 16, "f": 4}, None),
    ("regblock", "regblock", {}, None),
    ("regblock-bk8", "regblock", {"block_k": 8}, None),
    ("regblock-8x16", "regblock", {"block_n": 256, "thread_n": 16, "block_k": 8}, None),
    ("regblock-16x8", "regblock", {"block_m": 256, "thread_m": 16, "block_k": 8}, None),
    ("regblock-128x64", "regblock", {"block_n": 64, "thread_n": 4}, None),
    ("regblock-64x128", "regblock", {"block_m": 64, "thread_m": 4}, None),
    ("cublas", "cublas", {}, None),
]


def build_twins(out: Path) -> ctypes.CDLL:
    lib = out / "libtwins.so"
    subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-Xcompiler", "-fPIC", "-shared", str(HERE / "twins" / "twins.cu"),
                    "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def twin_launcher(lib, name, param, dtype, a, b, c):
    fn = getattr(lib, f"twin_{name}_{dtype}")
    m, k = a.shape
    n = b.shape[1]
    args = [ctypes.c_void_p(a.data.ptr), ctypes.c_void_p(b.data.ptr), ctypes.c_void_p(c.data.ptr),
            ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_int(param)]

    def launch():
        rc = fn(*args)
        if rc:
            raise RuntimeError(f"twin {name} failed with CUDA error {rc}")
    return launch


def main():
    ap = harness.parser(sizes=[2048, 4096], dtypes=["float32", "int32"])
    ap.add_argument("--variants", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=float, default=0.3)
    ap.add_argument("--prewarm", type=float, default=5.0)
    args = harness.parse(ap)
    import cupy as cp
    lib = build_twins(args.out)
    stamp = harness.stamp("gpu_ladder.py", args, env="PYTHONPATH=src")
    variants = [v for v in VARIANTS if not args.variants or v[0] in args.variants]
    harness.prewarm(args.prewarm, "float32")
    records = []
    for dtype in args.dtypes:
        for n in args.sizes:
            a_h, b_h = operands(n, n, n, n, dtype)
            a, b = cp.asarray(a_h), cp.asarray(b_h)
            launchers, outputs = {}, {}
            for label, kernel, params, twin in variants:
                plan = tilemm.plan(a, b, kernel=kernel, **params)
                launch, result = plan.prepare(poison=True)
                t0 = time.perf_counter()
                launch()
                cp.cuda.Device().synchronize()
                first = time.perf_counter() - t0
                launchers[label], outputs[label] = launch, (result, first)
                if twin:
                    c = cp.full((n, n), cp.nan if dtype.startswith("float") else -0x5A5A5A5A, dtype=dtype)
                    launchers[label + "-cuda-c"] = twin_launcher(lib, twin[0], twin[1], dtype, a, b, c)
                    launchers[label + "-cuda-c"]()
                    outputs[label + "-cuda-c"] = (lambda c=c: c, None)
            cp.cuda.Device().synchronize()
            verdicts = {label: compare(res(), a, b, dtype) for label, (res, _) in outputs.items()}
            good = {label: fn for label, fn in launchers.items() if verdicts[label].ok}
            times = interleaved_rounds(good, args.rounds, args.per_round)
            for label in launchers:
                spec = next((v for v in variants if v[0] == label), None)
                rec = {"variant": label, "kernel": spec[1] if spec else label, "params": spec[2] if spec else {},
                       "dtype": dtype, "m": n, "n": n, "k": n, "check": verdicts[label].message,
                       "status": "ok" if verdicts[label].ok else "FAILED", **stamp}
                if label in good:
                    med = statistics.median(times[label])
                    rec.update(median_ms=med, tflops=2 * n**3 / med / 1e9, samples=len(times[label]),
                               spread=(max(times[label]) - min(times[label])) / med,
                               launch_overhead_us=launch_overhead_us(good[label]))
                if outputs[label][1] is not None:
                    rec["first_call_s"] = outputs[label][1]
                records.append(rec)
            for label in launchers:
                if label.endswith("-cuda-c") and label in good and label[:-7] in good:
                    py = next(r for r in records[-len(launchers):] if r["variant"] == label[:-7])
                    tw = next(r for r in records[-len(launchers):] if r["variant"] == label)
                    py["vs_cuda_c"] = tw["median_ms"] / py["median_ms"]
            cub = next((r for r in records[-len(launchers):] if r["variant"] == "cublas" and "median_ms" in r), None)
            for r in records[-len(launchers):]:
                if cub and "median_ms" in r:
                    r["vs_cublas"] = cub["median_ms"] / r["median_ms"]
                print(f"{r['variant']:18} {dtype:8} {n:6} {r.get('median_ms', float('nan')):9.3f} ms "
                      f"{r.get('tflops', float('nan')):7.2f} T  vs C {r.get('vs_cuda_c', float('nan')):5.2f}  "
                      f"vs cuBLAS {r.get('vs_cublas', float('nan')):5.2f}  {r['status']} {r['check']}", flush=True)
            del a, b, launchers, outputs
            cp.get_default_memory_pool().free_all_blocks()
    harness.append(args.out / "gpu_ladder.jsonl", records)


if __name__ == "__main__":
    main()
