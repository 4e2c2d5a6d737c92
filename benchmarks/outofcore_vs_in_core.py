"""tilemm.spread.outofcore against the same product in core: host operands streamed through the GPU a
panel at a time (memory_limit forces the blocks that a product larger than the GPU would get)
against tilemm.matmul on device operands, TFLOP/s of each, the answer checked on sampled rows and
columns against float64.

    PYTHONPATH=src python3 benchmarks/outofcore_vs_in_core.py --out DIR --n 32768 --limits-gb 24 8 4
    PYTHONPATH=src python3 benchmarks/outofcore_vs_in_core.py --out DIR --n 128000 --in-core-n 32768 --limits-gb 0

The second: operands larger than the GPU's memory (A + B + C of 128000^2 bf16 are 1.15x an H100's
80 GB), against the in-core TFLOP/s at the size given.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import tilemm
import tilemm.spread.outofcore as ooc

import harness


def host_operand(n: int, dtype, seed: int):
    """n x n random values on the host, pinned (a 4096 x 4096 random tile repeated: fast to make,
    never zeros)."""
    g = torch.Generator().manual_seed(seed)
    tile = torch.randn((4096, 4096), generator=g).to(dtype)
    x = torch.empty((n, n), dtype=dtype, pin_memory=True)
    for i in range(0, n, 4096):
        for j in range(0, n, 4096):
            x[i:i + 4096, j:j + 4096] = tile[:min(4096, n - i), :min(4096, n - j)]
    return x


def sampled_error(c, a, b) -> float:
    rows = torch.arange(0, a.shape[0], max(1, a.shape[0] // 16))
    cols = torch.arange(0, b.shape[1], max(1, b.shape[1] // 16))
    ref = a[rows].cuda().double() @ b[:, cols].cuda().double()
    got = c[rows][:, cols].cuda().double()
    return ((got - ref).norm() / ref.norm()).item()


def busy(intervals) -> list:
    """The union of (start, end) intervals, as sorted disjoint ones."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def overlap(x, y) -> float:
    """Length of the intersection of two unions of disjoint intervals."""
    total, i, j = 0.0, 0, 0
    while i < len(x) and j < len(y):
        total += max(0.0, min(x[i][1], y[j][1]) - max(x[i][0], y[j][0]))
        i, j = (i + 1, j) if x[i][1] < y[j][1] else (i, j + 1)
    return total


def timeline(a, b, out, memory: int) -> dict:
    """One out-of-core product under torch's profiler: how long the GPU spent in products, in copies
    host -> device and device -> host, and in products and copies in to the device at once (ms)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        ooc.matmul(a, b, out=out, memory_limit=memory)
        torch.cuda.synchronize()
    kinds = {"products": [], "copies_in": [], "copies_out": []}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        name = e.name.lower()
        kind = ("copies_in" if "htod" in name else "copies_out" if "dtoh" in name else None) if "memcpy" in name \
            else None if "memset" in name else "products"
        if kind:
            kinds[kind].append((e.time_range.start, e.time_range.end))
    spans = {kind: busy(v) for kind, v in kinds.items()}
    every = [t for v in kinds.values() for iv in v for t in iv]
    record = {f"{kind}_ms": sum(e - s for s, e in v) / 1e3 for kind, v in spans.items()}
    record.update(gpu_span_ms=(max(every) - min(every)) / 1e3 if every else 0.0,
                  products_during_copies_in_ms=overlap(spans["products"], spans["copies_in"]) / 1e3,
                  copies_in=len(kinds["copies_in"]), copies_out=len(kinds["copies_out"]))
    return record


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--limits-gb", type=float, nargs="+", default=[24, 8, 4],
                    help="device memory to plan for, GiB (0: tilemm.spread.outofcore's default, from the free memory)")
    ap.add_argument("--in-core-n", type=int, help="the in-core product's size, if not --n (which may not fit)")
    ap.add_argument("--timeline", action="store_true",
                    help="also profile one out-of-core product per limit: time in products, in copies, in both")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = harness.stamp("outofcore_vs_in_core.py", args, env="PYTHONPATH=src")
    dtype, n = getattr(torch, args.dtype), args.in_core_n or args.n
    a, b = host_operand(n, dtype, 1), host_operand(n, dtype, 2)
    records = []
    a_d, b_d = a.cuda(), b.cuda()                      # in core: the same rung on device operands
    tilemm.matmul(a_d, b_d)
    times = []
    for _ in range(5):
        t, c_d = harness.timed(lambda: tilemm.matmul(a_d, b_d))
        times.append(t)
    in_core = sorted(times)[2]
    in_core_tflops = 2.0 * n ** 3 / in_core / 1e12
    records.append(dict(variant="in core", n=n, seconds=in_core, tflops=in_core_tflops,
                        error=sampled_error(c_d.cpu(), a, b)))
    a_d = b_d = c_d = None                        # the in-core operands let go
    torch.cuda.empty_cache()
    if args.in_core_n:
        del a, b
        n = args.n
        a, b = host_operand(n, dtype, 1), host_operand(n, dtype, 2)
    flops = 2.0 * n ** 3
    out = torch.empty((n, n), dtype=dtype, pin_memory=True)
    sums = 4 if args.dtype in ("bfloat16", "float16") else a.element_size()
    for limit in args.limits_gb:
        memory = int(limit * 2**30) or int(torch.cuda.mem_get_info()[0] * ooc.HEADROOM)
        plan = ooc.plan_blocks(n, n, n, a.element_size(), sums, a.element_size(), memory)
        if not args.in_core_n:
            ooc.matmul(a, b, out=out, memory_limit=memory)       # warm (compiles, allocator)
        t, _ = harness.timed(lambda: ooc.matmul(a, b, out=out, memory_limit=memory))
        records.append(dict(variant=f"out of core, {memory / 2**30:.1f} GiB", n=n, seconds=t, tflops=flops / t / 1e12,
                            blocks=plan.count(n, n, n), block_shape=(plan.block_m, plan.block_n, plan.block_k),
                            operands_vs_gpu_memory=3 * n * n * a.element_size() / torch.cuda.mem_get_info()[1],
                            error=sampled_error(out, a, b)))
        if args.timeline:
            records[-1]["timeline"] = timeline(a, b, out, memory)
            print(f"timeline: {records[-1]['timeline']}", flush=True)
    with open(args.out / "outofcore.jsonl", "a") as f:
        for r in records:
            r.update(dtype=args.dtype, vs_in_core=r["tflops"] / in_core_tflops, **stamp)
            f.write(json.dumps(r) + "\n")
            print(f"{r['variant']:26} {r['seconds'] * 1e3:9.1f} ms {r['tflops']:7.1f} TFLOP/s "
                  f"{r['vs_in_core']:5.2f}x in core  blocks {r.get('blocks', '')} err {r['error']:.2e}", flush=True)


if __name__ == "__main__":
    main()
