"""What one call costs, whole, as a user calling tilemm.matmul in a loop pays it: wall time per
call of a loop of calls (inputs on the GPU, the result allocated by the call, one synchronization
at the end), tilemm beside torch.matmul and CuPy on the same operands, in interleaved rounds,
over sizes 64 ... 4096, dtypes and rungs. Every variant's answer is checked first.

    PYTHONPATH=src python3 benchmarks/call_overhead.py --out DIR --sizes 64 256 512 1024 2048 4096

Where the wall time exceeds the GPU's, the CPU's cost of a call sets the pace.
"""
from __future__ import annotations

import json

import torch

import tilemm
from tilemm.numerics.accuracy import compare

import harness

# (dtype, tilemm kernel): None is the default a user gets
CASES = [("bfloat16", None), ("bfloat16", "tensorcore"), ("float32", None), ("float32", "tensorcore-f32"),
         ("float32", "regblock")]


def variants(dtype, kernel, a, b):
    """label -> call, the baselines first; each returns the product."""
    calls = {"torch.matmul": lambda: torch.matmul(a, b)}
    if dtype != "bfloat16":
        import cupy
        ca, cb = cupy.asarray(a), cupy.asarray(b)
        calls["cupy.matmul"] = lambda: cupy.matmul(ca, cb)
    calls[f"tilemm kernel={kernel}"] = lambda: tilemm.matmul(a, b, kernel=kernel)
    return calls


def main():
    args = harness.arguments(n=0, sizes=[64, 256, 512, 1024, 2048, 4096], rounds=5, calls=200)
    stamp = harness.stamp("call_overhead.py", args)
    torch.backends.cuda.matmul.allow_tf32 = False           # torch's float32 is SGEMM, as tilemm's default
    import cupy
    cupy.cuda.Device().synchronize()
    with open(args.out / "call_overhead.jsonl", "a") as f:
        for n in args.sizes:
            for dtype, kernel in CASES:
                a = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
                b = torch.randn_like(a)
                calls = variants(dtype, kernel, a, b)
                checked = {}
                for label, call in calls.items():               # compiles, and checks every answer
                    c = torch.as_tensor(call(), device="cuda")
                    verdict = compare(*(cupy.asarray(x.float()) for x in (c, a, b)), dtype)   # on the GPU
                    checked[label] = verdict.ok
                count = max(5, min(args.calls, int(2e11 / (2 * n ** 3)) or 5))   # ~a second a variant at most
                times = harness.medians(harness.rounds(calls, args.rounds, lambda call: harness.wall_us(call, count)))
                torch_us = times["torch.matmul"]
                for label, us in times.items():
                    rec = {"variant": label, "dtype": dtype, "n": n, "wall_us_per_call": us, "vs_torch": us / torch_us,
                           "answer_ok": checked[label], "calls_per_round": count, "rounds": args.rounds, **stamp}
                    f.write(json.dumps(rec) + "\n")
                    print(f"{n:5} {dtype:9} {label:32} {us:9.1f} us  {us / torch_us:5.2f}x torch"
                          f"{'' if checked[label] else '  WRONG ANSWER'}", flush=True)


def profile(n: int = 1024):
    """Where the CPU's time of a call goes: cProfile of 300 calls of each tilemm variant, bf16."""
    import cProfile
    import pstats
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    for kernel in (None, "tensorcore"):
        tilemm.matmul(a, b, kernel=kernel)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            tilemm.matmul(a, b, kernel=kernel)
        prof.disable()
        torch.cuda.synchronize()
        print(f"--- kernel={kernel}, bf16 {n}^3, 300 calls")
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
