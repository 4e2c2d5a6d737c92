"""A try (session 20): fp8 `scaled_matmul` on products of 256-2048 rows (prefill) whose default
tiles make less than a round or little more, whole calls: the default against smaller tiles, with
and without stream-K, and torch._scaled_mm.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_mid_try.py
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

SHAPES = [(m, n, k) for m in (256, 512, 1024, 2048) for (n, k) in ((3072, 2048), (4096, 4096), (6144, 4096),
                                                                     (4096, 14336), (8192, 8192))]
VARIANTS = {
    "stream_k": dict(stream_k=True),
    "128x128 w4": dict(block_m=128, block_n=128, num_warps=4),
    "128x128 w8": dict(block_m=128, block_n=128, num_warps=8),
    "128x128 w8 stream_k": dict(block_m=128, block_n=128, num_warps=8, stream_k=True),
    "64x128": dict(block_m=64, block_n=128, num_warps=4),
    "64x256": dict(block_m=64, block_n=256, num_warps=4),
}


def main():
    out = os.environ.get("OUT", "/tmp")
    base = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_mid_try.py")
    gpu_ladder.prewarm(5)
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).T
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
        for fast in (False, True):
            launch = {"default": lambda f=fast: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f)}
            for label, params in VARIANTS.items():
                launch[label] = lambda p=params, f=fast: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f, **p)
            if m % 16 == 0 and n % 16 == 0 and k % 16 == 0:
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
            with open(f"{out}/fp8_mid_try.jsonl", "a") as f:
                f.write(json.dumps(dict(base, m=m, n=n, k=k, fast_accum=fast, us=us, errors=errors)) + "\n")
            print(f"{m}x{n}x{k} fast={fast} " + " ".join(f"[{label}] {t:.1f}" for label, t in us.items()), flush=True)


def wide():
    """Every wide-sweep problem t5_fp8.resolve now gives 128 x 128 (MID_TILES) tiles, or 64 x 128
    (thin_tiles) at M > 128: the default against the tiles it had before this session's rules (float32
    sums: the Gluon program from K = 4096, else 256 x 128; fast: 128 x 256), _scaled_mm beside."""
    from tilemm.bench.suites import wide_problems
    from tilemm.ladder.tensorcore.t5_fp8 import DEFAULTS, WARP_SPECIALIZED_FROM_K, resolve
    out = os.environ.get("OUT", "/tmp")
    base = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_mid_try.py --wide")
    gpu_ladder.prewarm(5)
    for p in wide_problems():
        m, n, k = p.m, p.n, p.k
        a = b = None
        for fast in (False, True):
            tiles = resolve(DEFAULTS, fast, m, n, k)
            rule = "thin" if tiles["block_m"] == 64 else "mid" if (tiles["block_m"], tiles["block_n"]) == (128, 128) else None
            if rule is None or rule == "thin" and m <= 128:      # M <= 128: fp8_thin_wide.jsonl
                continue
            if a is None:
                a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).T
                sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
            before = (dict(block_m=128, block_n=256) if fast else dict(warp_specialized=True)
                      if k >= WARP_SPECIALIZED_FROM_K else dict(block_m=256, block_n=128))
            launch = {"default": lambda f=fast: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f),
                      "before": lambda f=fast, q=before: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=f, **q)}
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
            with open(f"{out}/fp8_rules_wide.jsonl", "a") as f:
                f.write(json.dumps(dict(base, m=m, n=n, k=k, split=p.split, rule=rule, fast_accum=fast, us=us,
                                        errors=errors)) + "\n")
            print(f"{p.split} {rule} {m}x{n}x{k} fast={fast} " + " ".join(f"[{label}] {t:.1f}" for label, t in us.items())
                  + f"  x{us['before'] / us['default']:.2f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--wide"]:
        wide()
    else:
        main()
