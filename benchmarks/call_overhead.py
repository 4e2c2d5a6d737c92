"""What one call costs, whole (issue 9; a user calling tilemm.matmul in a loop): wall time per
call of 300 calls in a row, one synchronization at the end, and the GPU's time per call between
two CUDA events, bf16 n x n CUDA tensors: torch.matmul, tilemm.matmul with the default kernel
(the library), with kernel="tensorcore", "auto" (its choice cached first), and a prepared plan's
launch. Where the wall time exceeds the GPU's, the CPU's cost of a call sets the pace.

    PYTHONPATH=src:benchmarks python3 benchmarks/call_overhead.py --out DIR --sizes 1000 4096
"""
from __future__ import annotations

import json
import time

import torch

import tilemm
from tilemm import tuning

import gpu_ladder  # noqa: E402  (--out, records)


def wall_us(call, calls: int = 300) -> float:
    call()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def gpu_us(call, calls: int = 100) -> float:
    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def main():
    args = gpu_ladder.out_and_n(1000, sizes=[1000, 4096])
    stamp = gpu_ladder.try_stamp("call_overhead.py", args)
    with open(args.out / "call_overhead.jsonl", "a") as f:
        for n in map(int, args.sizes):
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn_like(a)
            c = torch.empty_like(a)
            tilemm.matmul(a, b, kernel="auto")                   # tunes once; later calls read the cache
            launch, _ = tilemm.plan(a, b, kernel="tensorcore").prepare()
            calls = {"torch.matmul": lambda: torch.matmul(a, b, out=c),
                     "tilemm.matmul (default)": lambda: tilemm.matmul(a, b),
                     "tilemm.matmul kernel=tensorcore": lambda: tilemm.matmul(a, b, kernel="tensorcore"),
                     "tilemm.matmul kernel=auto": lambda: tilemm.matmul(a, b, kernel="auto"),
                     "prepared tensorcore launch": launch}
            for label, call in calls.items():
                rec = {"variant": label, "n": n, "wall_us_per_call": wall_us(call), "gpu_us_per_call": gpu_us(call),
                       "auto_choice": tuning.last.get("params"), **stamp}
                print(f"{n:5} {label:34} wall {rec['wall_us_per_call']:8.1f} us   GPU {rec['gpu_us_per_call']:8.1f} us",
                      flush=True)
                f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
