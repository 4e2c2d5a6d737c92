"""A stress run of tilemm inside a program as users write them: thousands of random calls on the
GPU (shapes 0 to 20000, odd ones included, every dtype and rung, random layouts (negative strides
too), array kinds and streams, operands off 16-byte alignment, calls repeated on new operands,
several threads at once), each answer checked against a reference, ending with the count of
calls, wrong answers and faults (both must be 0).

    PYTHONPATH=src python3 benchmarks/stress.py --calls 2000 --threads 4 --out DIR

A call's answer is checked on a sample of C (its first and last rows and columns among them)
against NumPy on the host: exact for integers (NumPy wraps as tilemm must), within
tilemm.numerics.accuracy's bound for floats. A call a rung refuses (KernelUnavailable) or that runs out of
GPU memory is counted apart; any other exception is a fault.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

import tilemm
from tilemm.numerics import arrays
from tilemm.numerics.accuracy import compare
from tilemm.numerics.data import random_operand
from tilemm.numerics.dtypes import result_dtype

import harness

SIMT = ("naive", "naive-global", "uncoalesced", "tiled", "rect", "regblock")
CASES = ([(k, d) for k in SIMT for d in ("int32", "int64", "float32", "float64")]
         + [("tensorcore", d) for d in ("float16", "bfloat16")]
         + [("tensorcore-int", d) for d in ("int8", "int16", "int32", "int64")]
         + [("tensorcore-f64", "float64"), ("tensorcore-f32", "float32")]
         + [("cublas", d) for d in ("int32", "int64", "float16", "bfloat16", "float32", "float64")]
         + [(None, d) for d in ("int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32",
                                "float64")])
MAX_DIM = 20000
WORK_CAP = {"simt": 2e9, "other": 3e11}       # m n k: keeps one call under a second or so
ELEMENT_CAP = 2e7                             # m k + k n + m n: keeps the host copies small


def random_shape(rng, kernel):
    """M, N, K log-uniform in [0, MAX_DIM], half of them odd, shrunk to the caps."""
    dims = [int(math.exp(rng.uniform(0, math.log(MAX_DIM + 1)))) - 1 for _ in range(3)]
    dims = [d | 1 if rng.random() < 0.5 and d else d for d in dims]
    cap = WORK_CAP["simt" if kernel in SIMT else "other"]
    while dims[0] * dims[1] * dims[2] > cap or dims[0] * dims[2] + dims[2] * dims[1] + dims[0] * dims[1] > ELEMENT_CAP:
        i = int(np.argmax(dims))
        dims[i] = dims[i] * 2 // 3
    return dims


def layout(how, x):
    """x as it is ("n"), transposed ("t": a column-major copy), every other column of a wider
    array ("s"), walked backwards ("r": negative strides, which NumPy and CuPy have and torch
    hasn't), or as it is one element past an aligned address ("o": to_kind makes the offset)."""
    if how == "t":
        return np.ascontiguousarray(x.T).T
    if how == "r":
        return np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]
    if how == "s":
        wide = np.empty((x.shape[0], 2 * x.shape[1]), x.dtype)
        wide[:, ::2] = x
        return wide[:, ::2]
    return x


def to_kind(x, dtype, kind, offset=False):
    """The host array x as the kind the call gets: NumPy, a torch CUDA tensor or a CuPy array,
    its strides kept; offset (x contiguous): one element past the start of a device buffer, so
    that its address is not 16-byte aligned."""
    import torch
    if kind == "numpy":
        return x
    if kind == "cupy":
        import cupy
        if min(x.strides, default=0) < 0:
            return cupy.asarray(np.ascontiguousarray(x[::-1, ::-1]))[::-1, ::-1]
        if offset:
            flat = cupy.empty(x.size + 1, x.dtype)
            flat[1:] = cupy.asarray(x).ravel()
            return flat[1:].reshape(x.shape)
        return cupy.asarray(x)
    t = torch.from_numpy(x if min(x.strides, default=0) >= 0 else np.ascontiguousarray(x))
    t = t.to(torch.bfloat16).cuda() if dtype == "bfloat16" else t.cuda()
    if offset:
        flat = torch.empty(t.numel() + 1, dtype=t.dtype, device="cuda")
        flat[1:].copy_(t.reshape(-1))
        return flat[1:].view(t.shape)
    return t


def sample_check(c, a, b, result, rng):
    """C's answer on up to 8 rows and 256 columns (the first and last among them)."""
    m, n = a.shape[0], b.shape[1]
    if m == 0 or n == 0:
        return tuple(c.shape) == (m, n)
    rows = np.unique(np.r_[0, m - 1, rng.integers(0, m, 6)])
    cols = np.unique(np.r_[0, n - 1, rng.integers(0, n, 254)])
    c_host = arrays.to_host(c, result)[np.ix_(rows, cols)]
    a_s, b_s = a[rows].astype(result if result != "bfloat16" else np.float32), b[:, cols]
    b_s = b_s.astype(result if result != "bfloat16" else np.float32)
    return compare(c_host, a_s, b_s, result).ok


def one_call(rng, side, stats, deadline):
    """One problem, called 1 to 3 times on fresh operands of the same shapes and layouts (a
    repeated call takes the cached plan and replays its launches), some of them one element off
    an aligned address, none started past the deadline; every answer checked."""
    kernel, dtype = CASES[rng.integers(len(CASES))]
    m, n, k = random_shape(rng, kernel)
    kinds = ["torch", "torch", "torch", "numpy"] + (["cupy"] if dtype != "bfloat16" else [])
    kind = kinds[rng.integers(len(kinds))]
    if kind == "numpy" and dtype == "bfloat16":
        kind = "torch"
    layouts = [rng.choice(["n", "n", "t", "s", "o", "r"]) for _ in range(2)]
    how = rng.choice(["current", "side", "argument"]) if kind == "torch" else "current"
    for _ in range(rng.integers(1, 4)):
        if time.perf_counter() > deadline:
            return
        offsets = [lay == "o" and rng.random() < 0.5 for lay in layouts]
        a = layout(layouts[0], random_operand(rng, (m, k), dtype))
        b = layout(layouts[1], random_operand(rng, (k, n), dtype))
        case = dict(kernel=kernel, dtype=dtype, m=m, n=n, k=k, kind=kind, stream=how, layouts="".join(layouts),
                    offsets=offsets)
        checked_call(case, a, b, side, stats, rng)


def checked_call(case, a, b, side, stats, rng):
    """One call of the case (its kernel, dtype, array kind, stream and offsets) on a and b, its
    answer checked and counted in stats."""
    import torch
    kernel, dtype, kind, how, offsets = (case[key] for key in ("kernel", "dtype", "kind", "stream", "offsets"))
    a_d, b_d = to_kind(a, dtype, kind, offsets[0]), to_kind(b, dtype, kind, offsets[1])
    result = result_dtype(dtype, dtype)
    try:
        if how == "current":
            c = tilemm.matmul(a_d, b_d, kernel=kernel)
        else:   # a producer on a side stream writes A after a sleep; the call must wait for it
            x = torch.empty_like(a_d)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(2_000_000)
                x.copy_(a_d)
                c = tilemm.matmul(x, b_d, kernel=kernel) if how == "side" else None
            if how == "argument":
                c = tilemm.matmul(x, b_d, kernel=kernel, stream=side)
            side.synchronize()
        torch.cuda.synchronize()
        ok = sample_check(c, a, b, result, rng)
        stats["calls"] += 1
        if not ok:
            stats["wrong"] += 1
            stats["wrong_cases"].append(case)
    except tilemm.KernelUnavailable:
        stats["refused"] += 1
    except Exception as e:      # noqa: BLE001
        if "out of memory" in str(e).lower():
            stats["out_of_memory"] += 1
            return
        stats["faults"] += 1
        stats["fault_cases"].append(dict(case, error=traceback.format_exception_only(e)[-1].strip()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seconds", type=float, default=600, help="stop starting calls after this long")
    p.add_argument("--out", default=None, help="a folder for stress.jsonl")
    args = p.parse_args(argv)
    import torch
    stats = {"calls": 0, "wrong": 0, "faults": 0, "refused": 0, "out_of_memory": 0, "wrong_cases": [],
             "fault_cases": []}
    lock = threading.Lock()
    start = time.perf_counter()

    def worker(i):
        rng = np.random.default_rng([args.seed, i])
        side = torch.cuda.Stream()
        mine = {key: ([] if isinstance(v, list) else 0) for key, v in stats.items()}
        for j in range(args.calls // args.threads):
            if time.perf_counter() - start > args.seconds:
                break
            one_call(rng, side, mine, start + args.seconds)
            if i == 0 and j % 50 == 0:
                print(f"thread 0: {j} calls, {time.perf_counter() - start:.0f} s", flush=True)
            if mine["faults"] and "illegal" in json.dumps(mine["fault_cases"]):
                break                 # the context is dead: nothing after this call can run
        with lock:
            for key, v in mine.items():
                stats[key] += v
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = {"benchmark": "stress", **{k: v for k, v in stats.items()}, "threads": args.threads, "seed": args.seed,
              "seconds": round(time.perf_counter() - start, 1), **harness.stamp("stress.py", args, env="PYTHONPATH=src")}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        harness.append(out / "stress.jsonl", [record])
    print(json.dumps({k: record[k] for k in ("calls", "wrong", "faults", "refused", "out_of_memory", "seconds")}))
    for case in stats["wrong_cases"][:20] + stats["fault_cases"][:20]:
        print(case)
    return 1 if stats["wrong"] or stats["faults"] else 0


if __name__ == "__main__":
    sys.exit(main())
