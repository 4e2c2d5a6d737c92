"""A try (session 20): `tensorcore` on products 17-64 rows thin (M or N), whole calls: the shipped
default (16-row tiles unless 64-row ones with split K fill every SM) against tiles as thick as the
thin side with K split into enough runs to fill the SMs once or twice, and torch.matmul.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/skinny64_try.py
"""
import json
import os
import statistics

import torch

import tilemm
from tilemm import machine
from tilemm.accuracy import compare_on_device
from tilemm.timing import interleaved_rounds

import gpu_ladder  # noqa: E402

# the fit grid: thin side, (other side, K), layout
GRID = [(t, n, k, lay) for t in (32, 64) for (n, k) in ((2048, 2048), (3072, 2048), (2048, 8192), (4096, 4096),
                                                        (5120, 5120), (4096, 14336), (6144, 4096), (3072, 8192))
        for lay in ("nn", "tn")]


def operands(m, n, k, layout):
    a = torch.randn(k, m, device="cuda", dtype=torch.bfloat16).T if layout[0] == "t" else \
        torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T if layout[1] == "t" else \
        torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    return a, b


def variants(m, n, k, a, b):
    thin = min(m, n)
    side = 1 << max(0, thin - 1).bit_length()
    steps = -(-k // 128)
    out = {"torch": lambda: torch.matmul(a, b), "default": lambda: tilemm.matmul(a, b, kernel="tensorcore")}
    for block_other in (64, 32):
        cover = -(-max(m, n) // block_other)
        for rounds in (1, 2):
            split = max(1, min(-(-rounds * 132 // cover), steps // 4))
            tiles = (side, block_other) if m <= n else (block_other, side)
            params = dict(block_m=tiles[0], block_n=tiles[1], block_k=128, num_warps=4, num_stages=4, split_k=split)
            out[f"thick {tiles[0]}x{tiles[1]} split {split}"] = (
                lambda p=params: tilemm.matmul(a, b, kernel="tensorcore", **p))
    return out


def main():
    out = os.environ.get("OUT", "/tmp")
    base = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/skinny64_try.py")
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False   # float32 sums, as tilemm
    gpu_ladder.prewarm(5)
    for m, n, k, layout in GRID:
        a, b = operands(m, n, k, layout)
        calls = variants(m, n, k, a, b)
        good = {}
        for label, call in calls.items():
            verdict = compare_on_device(call().float(), a.float(), b.float(), "bfloat16")
            if verdict.ok:
                good[label] = call
            else:
                print(m, n, k, layout, label, "WRONG", flush=True)
        times = {label: statistics.median(ts) for label, ts in interleaved_rounds(good, 5, 0.05).items()}
        rec = dict(base, m=m, n=n, k=k, layout=layout, us={label: t * 1e3 for label, t in times.items()})
        with open(f"{out}/skinny64_try.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"{m}x{n}x{k} {layout} " + " ".join(f"[{label}] {t * 1e3:.1f}" for label, t in times.items()), flush=True)


if __name__ == "__main__":
    main()
