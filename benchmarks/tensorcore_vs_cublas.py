"""Issue 9's first measurement: the Triton `tensorcore` rung against cuBLAS (torch.matmul) in
bf16 and fp16, interleaved rounds after a pre-warm, every variant checked first.

    PYTHONPATH=src python3 benchmarks/tensorcore_vs_cublas.py --out DIR [--sizes 4096 8192]
"""
import argparse
import datetime
import json
import statistics
import time

import tilemm
from tilemm import machine
from tilemm.accuracy import tolerance
from tilemm.bench.timing import time_cuda

import torch  # noqa: E402

CONFIGS = {"tc-default": {}, "tc-128x128x64-w4-s4": dict(block_n=128, num_warps=4, num_stages=4),
           "tc-autotune": dict(autotune=True)}

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--per-round", type=float, default=0.4)
ap.add_argument("--prewarm", type=float, default=10.0)
args = ap.parse_args()
info = machine.describe()
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t_end = time.perf_counter() + args.prewarm
while time.perf_counter() < t_end:
    x @ x
    torch.cuda.synchronize()
records = []
for dtype in (torch.bfloat16, torch.float16):
    for n in args.sizes:
        torch.manual_seed(n)
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        launches, checks = {}, {}
        c_ref = torch.empty(n, n, device="cuda", dtype=dtype)
        launches["cublas"] = lambda a=a, b=b, c=c_ref: torch.matmul(a, b, out=c)
        checks["cublas"] = lambda c=c_ref: c
        for label, params in CONFIGS.items():
            launch, result = tilemm.plan(a, b, kernel="tensorcore", **params).prepare(poison=True)
            launches[label], checks[label] = launch, result
        verdicts = {}
        for label in launches:
            launches[label]()
            torch.cuda.synchronize()
            # tilemm.accuracy's bound, evaluated on the GPU: float64 reference and |A||B| through torch
            c = checks[label]()
            ref = a.double() @ b.double()
            scale = a.double().abs() @ b.double().abs()
            rel_sum, rel_out = tolerance(str(dtype).removeprefix("torch."), n)
            ratio = ((c.double() - ref).abs() / (rel_sum * scale * (1 + rel_out) + rel_out * ref.abs() + 1e-30)).max()
            verdicts[label] = (bool(ratio <= 1) and not bool(torch.isnan(c).any()), float(ratio))
        times = {k: [] for k in launches if verdicts[k][0]}
        labels = list(times)
        for r in range(args.rounds):
            for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                times[label] += time_cuda([launches[label]], args.per_round, warmup_s=0.05)
        base = statistics.median(times["cublas"]) if "cublas" in times else None
        for label in launches:
            rec = {"variant": label, "kernel": "cublas" if label == "cublas" else "tensorcore",
                   "params": CONFIGS.get(label, {}), "dtype": str(dtype).removeprefix("torch."), "m": n, "n": n, "k": n,
                   "status": "ok" if verdicts[label][0] else "FAILED", "worst_vs_bound": verdicts[label][1],
                   "device": info["device"], "versions": info["versions"],
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "command": "PYTHONPATH=src python3 benchmarks/tensorcore_vs_cublas.py --out DIR"}
            if label in times:
                med = statistics.median(times[label])
                rec.update(median_ms=med, tflops=2 * n**3 / med / 1e9, vs_cublas=base / med if base else None)
            records.append(rec)
            print(f"{label:22} {rec['dtype']:9} {n:6} {rec.get('median_ms', float('nan')):8.3f} ms "
                  f"{rec.get('tflops', float('nan')):7.1f} T  vs cuBLAS {rec.get('vs_cublas') or float('nan'):5.3f}  "
                  f"{rec['status']} ({verdicts[label][1]:.2g}x bound)", flush=True)
with open(f"{args.out}/tensorcore_vs_cublas.jsonl", "a") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)
