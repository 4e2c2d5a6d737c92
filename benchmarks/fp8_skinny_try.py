"""A try (session 20): fp8 `scaled_matmul` on skinny products (M of 1-128 tokens: decode), whole
calls: the default (128- or 256-row tiles) against 64-row tiles, one round of tiles or shared out by
K steps among all SMs (stream_k), and torch._scaled_mm where it takes the shape.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_skinny_try.py
"""
import json
import os
import statistics
import sys

import torch

import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds

sys.path.insert(0, os.path.dirname(__file__))
from fp8_vs_scaled_mm import check  # noqa: E402
import gpu_ladder  # noqa: E402

SHAPES = [(m, n, k) for m in (1, 8, 32, 64, 128) for (n, k) in ((4096, 4096), (14336, 4096), (4096, 14336),
                                                                 (8192, 8192), (28672, 8192), (8192, 28672))]
VARIANTS = {
    "64x128 stream_k": dict(block_m=64, block_n=128, num_warps=4, stream_k=True),
    "64x256 stream_k": dict(block_m=64, block_n=256, num_warps=4, stream_k=True),
    "64x128": dict(block_m=64, block_n=128, num_warps=4),
    "64x64 stream_k": dict(block_m=64, block_n=64, num_warps=4, stream_k=True),
}


def main():
    out = os.environ.get("OUT", "/tmp")
    base = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_skinny_try.py")
    gpu_ladder.prewarm(5)
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).T
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
        for fast in (False, True):
            launch = {"default": lambda f=fast: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f)}
            for label, params in VARIANTS.items():
                launch[label] = lambda p=params, f=fast: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f, **p)
            if m % 16 == 0:
                launch["scaled_mm"] = lambda f=fast: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                                      use_fast_accum=f)
            timed, errors = {}, {}
            for label, fn in launch.items():
                try:
                    ok, errors[label] = check(fn(), a, b, 1.0, fast)
                except Exception as e:  # a variant refused or failing is reported, not timed
                    print(m, n, k, label, "FAILED", repr(e)[:200], flush=True)
                    continue
                if ok:
                    timed[label] = fn
                else:
                    print(m, n, k, label, "WRONG", errors[label], flush=True)
            us = {label: statistics.median(ts) * 1e3 for label, ts in interleaved_rounds(timed, 5, 0.04).items()}
            with open(f"{out}/fp8_skinny_try.jsonl", "a") as f:
                f.write(json.dumps(dict(base, m=m, n=n, k=k, fast_accum=fast, us=us, errors=errors)) + "\n")
            print(f"{m}x{n}x{k} fast={fast} " + " ".join(f"[{label}] {t:.1f}" for label, t in us.items()), flush=True)


def held_out():
    """The wide sweep's problems that t5_fp8.thin_tiles changes: the default against the tiles it
    had before (float32 sums: the Gluon program from K = 4096, else 256 x 128; fast: 128 x 256),
    _scaled_mm beside."""
    from tilemm.bench.suites import wide_problems
    from tilemm.ladder.tensorcore.t5_fp8 import WARP_SPECIALIZED_FROM_K, thin_tiles
    out = os.environ.get("OUT", "/tmp")
    base = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_skinny_try.py "
                         "--held-out")
    gpu_ladder.prewarm(5)
    for p in wide_problems():
        if thin_tiles(p.m, p.n, p.k) is None:
            continue
        m, n, k = p.m, p.n, p.k
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).T
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
        for fast in (False, True):
            before = (dict(block_m=128, block_n=256) if fast else dict(warp_specialized=True)
                      if p.k >= WARP_SPECIALIZED_FROM_K else dict(block_m=256, block_n=128))
            launch = {"default": lambda f=fast: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f),
                      "before": lambda f=fast, p=before: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f, **p)}
            if m % 16 == 0 and n % 16 == 0 and k % 16 == 0:
                launch["scaled_mm"] = lambda f=fast: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                                      use_fast_accum=f)
            timed, errors = {}, {}
            for label, fn in launch.items():
                ok, errors[label] = check(fn(), a, b, 1.0, fast)
                if ok:
                    timed[label] = fn
                else:
                    print(m, n, k, label, "WRONG", errors[label], flush=True)
            us = {label: statistics.median(ts) * 1e3 for label, ts in interleaved_rounds(timed, 5, 0.04).items()}
            with open(f"{out}/fp8_thin_wide.jsonl", "a") as f:
                f.write(json.dumps(dict(base, m=m, n=n, k=k, split=p.split, fast_accum=fast, us=us,
                                        errors=errors)) + "\n")
            print(f"{p.split} {m}x{n}x{k} fast={fast} " + " ".join(f"[{label}] {t:.1f}" for label, t in us.items())
                  + f"  x{us['before'] / us['default']:.2f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--held-out"]:
        held_out()
    else:
        main()
