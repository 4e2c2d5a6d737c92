"""The first call of every rung in a new process: cold (empty disk caches) and warm (a second new
process finding what the first compiled); every answer checked.

    PYTHONPATH=src python3 benchmarks/compile_times.py --out DIR [--kernels K ...] [--size N]

Each rung gets caches of its own, empty (NUMBA_CACHE_DIR and TRITON_CACHE_DIR in a temporary
folder), so its cold process compiles all it needs. In each process, per dtype the rung computes
natively, the first call (tilemm.matmul on N x N torch CUDA tensors, or NumPy arrays for a host
rung, to the synchronized result) and a second are timed; the first dtype's call is the process's
first, and pays importing numba-cuda or Triton as a user's first call does. cache_files_added: the
files the call added to the caches (none: all was loaded); numba_cuda: the SIMT kernels loaded from
the disk cache and compiled. Writes DIR/compile_times.jsonl, a record per rung, dtype and cold/warm.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import harness

def files_in(*folders) -> int:
    return sum(len(files) for folder in folders for _, _, files in os.walk(folder))


def child(name: str, size: int) -> None:
    """Time this process's first calls of rung `name`, a JSON line per dtype."""
    import tilemm
    from tilemm.numerics import arrays
    from tilemm.numerics.accuracy import compare_on_device
    from tilemm.numerics.data import operands

    kernel = tilemm.kernel(name)
    caches = (os.environ["NUMBA_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"])
    dtypes = ("float32",) if name == "numpy" else kernel.dtypes      # NumPy compiles nothing: one dtype says so
    if kernel.device == "cuda":
        import torch
        torch.cuda.init()           # the context exists before the first timed call, as in a user's program
        synchronize = torch.cuda.synchronize
    else:
        def synchronize():          # a host rung's call returns its result
            pass
    for dtype in dtypes:
        a, b = operands(0, size, size, size, dtype)
        if kernel.device == "cuda":
            da, db = (arrays.host_bfloat16(x).cuda() if dtype == "bfloat16" else torch.from_numpy(x).cuda()
                      for x in (a, b))
            torch.cuda.synchronize()
        else:
            da, db = a, b
        before = files_in(*caches)
        times = []
        for _ in range(2):
            seconds, c = harness.timed(lambda: tilemm.matmul(da, db, kernel=name), synchronize)
            times.append(seconds)
        verdict = compare_on_device(c, a, b, dtype)
        record = {"kernel": name, "backend": kernel.backend, "dtype": dtype, "m": size, "n": size, "k": size,
                  "first_call_s": times[0], "second_call_s": times[1], "check": verdict.message,
                  "status": "ok" if verdict.ok else "FAILED", "cache_files_added": files_in(*caches) - before}
        if kernel.backend == "numba-cuda":
            from tilemm.ladder.simt import launch
            record["numba_cuda"] = launch.disk_cache_counts()
        print(json.dumps(record, default=str), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write DIR/compile_times.jsonl (appended)")
    ap.add_argument("--kernels", nargs="+", help="these rungs only (default: every rung that runs here)")
    ap.add_argument("--size", type=int, default=256, help="the products' M = N = K (default 256)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds one process may take (default 300)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.size)
        return 0
    if args.out is None:
        ap.error("--out DIR is required")

    import tilemm
    names = args.kernels or [k.name for k in tilemm.kernels() if k.available() is None]
    for name in names:
        tilemm.kernel(name)            # an unknown name: refused before any work
    stamp = harness.stamp("compile_times.py", args, env="PYTHONPATH=src")
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    with open(args.out / "compile_times.jsonl", "a") as out:
        for name in names:
            with tempfile.TemporaryDirectory(prefix="tilemm-cold-") as tmp:
                env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "TRITON_INTERPRET")}
                env.update(NUMBA_CACHE_DIR=f"{tmp}/numba", TRITON_CACHE_DIR=f"{tmp}/triton")
                for label in ("cold", "warm"):
                    start = time.perf_counter()
                    records, error = harness.child_lines(
                        [sys.executable, __file__, "--child", name, "--size", str(args.size)], env, args.timeout)
                    if error:
                        records.append({"kernel": name, "status": "FAILED", "check": error})
                    for r in records:
                        r.update(label=label, process_s=time.perf_counter() - start, **stamp)
                        out.write(json.dumps(r) + "\n")
                        failed += r["status"] != "ok"
                        first = f"{r['first_call_s']:7.3f} s first, {r['second_call_s'] * 1e3:8.2f} ms second" \
                            if "first_call_s" in r else r["check"][:200]
                        print(f"{label:4} {name:20} {r.get('dtype', ''):10} {first}  {r['status']}"
                              f"  files+{r.get('cache_files_added', '?')} {r.get('numba_cuda', '')}", flush=True)
                    out.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
