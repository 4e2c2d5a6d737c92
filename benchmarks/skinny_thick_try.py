"""Try: skinny 16-bit products (M of 32-64) in thick tiles with K split, whole calls, against the
default and torch.matmul. Fit grid only (no held-out problem of the wide sweep)."""
import json, os, sys, statistics, time
sys.path.insert(0, "benchmarks")
import torch
import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds, paired_ratio
from tensorcore_vs_cublas import laid_out, checked, whole_call

out = os.environ["OUT"]
NK = [(3072, 2048), (8192, 2048), (5120, 4096), (14336, 4096), (6400, 5120), (13568, 5120), (10240, 8192),
      (28672, 8192), (1024, 4096), (2048, 6144), (3072, 12288), (4096, 3072), (6144, 6144), (1536, 16384)]
stamp = machine.stamp("PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/skinny_thick_try.py")
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t_end = time.perf_counter() + 5
while time.perf_counter() < t_end:
    x @ x
torch.cuda.synchronize()
del x
for m in (64, 32):
    for n, k in NK:
        for layout in ("nn", "tn"):
            a, b = laid_out(m, k, layout[0], torch.bfloat16), laid_out(k, n, layout[1], torch.bfloat16)
            variants = {"cublas": None, "default": {}}
            for s in (1, 2, 3, 4):
                variants[f"thick64s{s}"] = dict(block_m=m, block_n=64, block_k=128, num_warps=4, num_stages=4, split_k=s)
            for s in (2, 4, 6):
                variants[f"thick128s{s}"] = dict(block_m=m, block_n=128, block_k=128, num_warps=4, num_stages=4, split_k=s)
            launches, ok = {}, {}
            for label, params in variants.items():
                call = (lambda: torch.matmul(a, b)) if params is None else (
                    lambda params=params: tilemm.matmul(a, b, kernel="tensorcore", **params))
                launch, result = whole_call(call, m, n, torch.bfloat16)
                launch()
                ok[label] = checked(result(), a, b, "bfloat16")[0]
                if ok[label]:
                    launches[label] = launch
            rounds = interleaved_rounds(launches, 3, 0.03, by_round=True)
            rec = {"m": m, "n": n, "k": k, "layout": layout, **stamp,
                   "us": {l: round(statistics.median([t for r in rs for t in r]) * 1e3, 2) for l, rs in rounds.items()},
                   "vs_cublas": {l: round(paired_ratio(rounds["cublas"], rs), 3) for l, rs in rounds.items()},
                   "failed": [l for l, v in ok.items() if not v]}
            print(json.dumps({k2: rec[k2] for k2 in ("m", "n", "k", "layout", "us", "failed")}), flush=True)
            with open(f"{out}/skinny_try.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
