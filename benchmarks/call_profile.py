"""Where a small call's time goes: the CPU's part and the GPU's, tilemm's default against the
baseline, on the problems where the default's whole calls ran under 0.97x the baseline in the
bars' own benchmarks (int8_small_m.py's held-out set, against torch._int_mm; small_calls.py's
held-out half, against torch.matmul).

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/call_profile.py --out DIR

For each problem and each of the two calls, after its answer is checked (int8 exactly against
_int_mm's; floats against a float64 product, tilemm.numerics.accuracy's bound):

- host_us: the CPU's time a call, a loop of calls with no synchronization inside (each returns as
  soon as its work is queued; the queue never fills in --calls calls);
- kernel_us: the GPU's kernel time a call, from torch.profiler's CUDA kernel events;
- call_us: the bars' measure, CUDA events around one call with the GPU idle before it (the CPU's
  part and the GPU's one after the other), the median.

Where the kernels' times are level and host_us apart, the CPU's path is what the ratio measures.
One JSON line a problem, stamped; interleaved (the two calls alternate), medians of --rounds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import tilemm
from tilemm.numerics.accuracy import compare_on_device

import harness

# (M, N, K) of int8_small_m.py's held-out set where the default ran under 0.97x _int_mm
INT8 = [(17, 4096, 4096), (64, 4096, 4096), (100, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096),
        (17, 1024, 4096), (64, 1024, 4096), (128, 1024, 4096), (512, 1024, 4096), (1024, 1024, 4096),
        (17, 14336, 4096), (100, 4096, 11008), (17, 5120, 5120), (64, 5120, 5120), (17, 13824, 5120),
        (17, 2560, 2048), (64, 2560, 2048), (256, 2560, 2048), (512, 2560, 2048), (64, 6144, 4096),
        (128, 6144, 4096), (64, 5120, 13824), (33, 8192, 28672), (64, 8192, 28672)]
# (dtype, M, N, K, layout) of small_calls.py's held-out half where the default ran under 0.97x torch.matmul
FLOATS = [("bfloat16", 7, 43, 70, "tt"), ("bfloat16", 4954, 94, 3, "nn"), ("bfloat16", 1057, 2560, 34, "tt"),
          ("bfloat16", 13, 2599, 256, "nn"), ("bfloat16", 327, 1, 437, "nt"), ("float16", 21, 128, 27, "nt"),
          ("float16", 92, 42, 8192, "tt"), ("float16", 100, 4096, 326, "tt"), ("float16", 1000, 101, 377, "nn"),
          ("float16", 1, 3004, 128, "tn"), ("float32", 20, 44, 128, "tn"), ("float32", 148, 257, 605, "tn"),
          ("float32", 1, 45, 64, "nn"), ("float32", 127, 112, 1000, "tt"), ("float32", 4096, 7, 37, "nn"),
          ("float32", 5, 24, 10404, "nt"), ("float32", 128, 226, 2142, "tn"), ("float32", 512, 121, 1247, "tt"),
          ("float32", 1000, 100, 28, "tt"), ("float64", 97, 1179, 128, "nn"), ("float64", 13, 17, 3926, "nn"),
          ("float64", 4324, 17, 1, "nt"), ("float64", 1, 2560, 806, "tn"), ("float64", 1197, 14, 1024, "nn"),
          ("float64", 5162, 46, 256, "tt")]


def kernel_us(call, calls: int) -> float | None:
    """GPU kernel time a call: the CUDA kernel events' durations over `calls` calls."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:
        return None
    return sum(e.time_range.elapsed_us() for e in kernels) / calls


def int8_calls(m: int, n: int, k: int, g):
    a = torch.randint(-128, 128, (m, k), generator=g, device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, device="cuda", dtype=torch.int8).T
    ours, theirs = (lambda: tilemm.matmul(a, b, out_dtype="int32")), (lambda: torch._int_mm(a, b))
    ok = torch.equal(ours(), theirs())
    return {"dtype": "int8", "m": m, "n": n, "k": k, "layout": "A row-major, B (N, K).T", "baseline": "_int_mm",
            "kernel": tilemm.plan(a, b, out_dtype="int32").kernel.name, "answer_ok": ok}, ours, theirs


def float_calls(dtype: str, m: int, n: int, k: int, layout: str, g):
    a, b = harness.operand(m, k, layout[0], dtype, g), harness.operand(k, n, layout[1], dtype, g)
    ours, theirs = (lambda: tilemm.matmul(a, b)), (lambda: torch.matmul(a, b))
    verdict = compare_on_device(ours(), a, b, dtype)
    return {"dtype": dtype, "m": m, "n": n, "k": k, "layout": layout, "baseline": "torch.matmul",
            "kernel": tilemm.plan(a, b).kernel.name, "answer_ok": verdict.ok}, ours, theirs


def profile(fields: dict, ours, theirs, rounds: int, calls: int) -> dict:
    call_us = harness.event_timer()    # the int8 bar's own measure: events around one call, the GPU idle before
    pair = {"tilemm": ours, "baseline": theirs}
    measures = harness.rounds(pair, rounds, lambda call: (harness.host_us(call, calls),
                                                          statistics.median(call_us(call) for _ in range(5))))
    record = dict(fields)
    for label, call in pair.items():
        record[f"{label}_host_us"] = round(statistics.median(host for host, _ in measures[label]), 2)
        record[f"{label}_call_us"] = round(statistics.median(one for _, one in measures[label]), 2)
        kernel = kernel_us(call, calls)
        record[f"{label}_kernel_us"] = None if kernel is None else round(kernel, 2)
    record["call_ratio"] = round(record["baseline_call_us"] / record["tilemm_call_us"], 4)
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50, help="calls a host loop and a profile")
    ap.add_argument("--prewarm", type=float, default=3.0)
    ap.add_argument("--max-seconds", type=float, default=400.0, help="stop starting problems after this")
    args = ap.parse_args()
    out = harness.out_folder(args.out)
    stamp = harness.stamp("call_profile.py", args)
    harness.prewarm(args.prewarm, "float32")
    g = torch.Generator(device="cuda").manual_seed(0)
    started = time.time()
    problems = [("int8", p) for p in INT8] + [("float", p) for p in FLOATS]
    with open(out / "call_profile.jsonl", "a") as f:
        for kind, p in problems:
            if time.time() - started > args.max_seconds:
                print(f"stopped at --max-seconds, {problems.index((kind, p))} of {len(problems)} done", flush=True)
                break
            fields, ours, theirs = int8_calls(*p, g) if kind == "int8" else float_calls(*p, g)
            record = {**stamp, **(profile(fields, ours, theirs, args.rounds, args.calls) if fields["answer_ok"]
                                  else fields)}
            f.write(json.dumps(record) + "\n")
            f.flush()
            print({k: record.get(k) for k in ("dtype", "m", "n", "k", "layout", "kernel", "call_ratio",
                                              "tilemm_host_us", "baseline_host_us", "tilemm_kernel_us",
                                              "baseline_kernel_us")}, flush=True)


if __name__ == "__main__":
    main()
