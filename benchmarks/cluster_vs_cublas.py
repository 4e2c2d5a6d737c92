"""Rung `tensorcore`'s cluster=True (two CTAs a 256 x 256 tile, B loaded once for both: Gluon,
Triton 3.9) against cuBLAS (torch.matmul), the rung's one-CTA defaults and tilemm's default.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/cluster_vs_cublas.py --out DIR \
        [--sizes 8192 4096] [--dtypes bfloat16 float16] [--layouts nn nt]

Whole calls as a user makes them, each allocating its result: tilemm.matmul(a, b,
kernel="tensorcore", cluster=True) (`cluster`), tilemm.matmul(a, b, kernel="tensorcore")
(`tensorcore`), tilemm.matmul(a, b) (`default`) and torch.matmul(a, b) (`torch`). Layout "nn":
A and B row-major; "nt": B given as (N, K).T. Every answer is checked first against a float64
product of the same values on the GPU, within tilemm.numerics.accuracy's bound, and its errors recorded.
Protocol: pre-warm, interleaved rounds (order rotated), CUDA events, medians; vs_torch is
torch's median over the variant's. One stamped JSON line a (size, dtype, layout, variant) to
DIR/cluster_vs_cublas.jsonl. cluster=True is left out (and said so) where this Triton's Gluon has
no clusters.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import tilemm
from tilemm.system import machine
from tilemm.numerics.accuracy import denormal_floor, tolerance
from tilemm.engine.availability import gluon_multicast
from tilemm.system.timing import interleaved_rounds

import gpu_ladder  # noqa: E402  (pre-warm)

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def variants(a, b) -> dict:
    """label -> a whole call."""
    calls = {"torch": lambda: torch.matmul(a, b),
             "tensorcore": lambda: tilemm.matmul(a, b, kernel="tensorcore"),
             "default": lambda: tilemm.matmul(a, b)}
    if gluon_multicast():
        calls["cluster"] = lambda: tilemm.matmul(a, b, kernel="tensorcore", cluster=True)
    return calls


def checked(calls: dict, a, b, dtype: str, base: dict) -> tuple[dict, list]:
    """(the calls whose answers pass, a record of each): every answer against a float64 product on
    the GPU, within tilemm.numerics.accuracy's bound (float32 sums of K products, one rounding to dtype);
    each record carries its worst error over that bound and its max error relative to max |C|."""
    ref = a.double() @ b.double()
    rel_sum, rel_out = tolerance(dtype, a.shape[1])
    size = a.double().abs() @ b.double().abs()
    bound = rel_sum * size * (1 + rel_out) + rel_out * ref.abs() + denormal_floor(dtype)
    good, rows = {}, []
    for label, call in calls.items():
        try:
            err = (call().double() - ref).abs()
            over, rel = float((err / bound).max()), float(err.max() / ref.abs().max())   # NaN fails too
            ok = over <= 1
        except Exception as e:  # noqa: BLE001 - recorded as FAILED, the others still measured
            print(f"{label}: {type(e).__name__}: {e}"[:300], flush=True)
            ok, over, rel = False, float("nan"), float("nan")
        rows.append(dict(base, variant=label, status="ok" if ok else "FAILED", error_over_bound=over,
                         relative_error=rel))
        if ok:
            good[label] = call
    return good, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", nargs="+", type=int, default=[8192, 4096])
    ap.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["bfloat16"])
    ap.add_argument("--layouts", nargs="+", choices=["nn", "nt"], default=["nn", "nt"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=float, default=0.3)
    ap.add_argument("--prewarm", type=float, default=10.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = machine.stamp(machine.command_line(
        "PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/cluster_vs_cublas.py", args))
    if not gluon_multicast():
        print("cluster=True is not timed: this Triton's Gluon has no clusters", flush=True)
    gpu_ladder.prewarm(args.prewarm)
    for n in args.sizes:
        for dtype in args.dtypes:
            for layout in args.layouts:
                g = torch.Generator(device="cuda").manual_seed(n)
                a = torch.randn(n, n, generator=g, device="cuda").to(DTYPES[dtype])
                b = torch.randn(n, n, generator=g, device="cuda").to(DTYPES[dtype])
                if layout == "nt":
                    b = b.T                       # B given as (N, K).T: its columns contiguous
                base = dict(stamp, m=n, n=n, k=n, dtype=dtype, layout=layout)
                good, rows = checked(variants(a, b), a, b, dtype, base)
                times = interleaved_rounds(good, args.rounds, args.per_round)
                anchor = statistics.median(times["torch"]) if "torch" in times else float("nan")
                for rec in rows:
                    if rec["variant"] in times:
                        med = statistics.median(times[rec["variant"]])
                        rec.update(median_ms=med, tflops=2 * n**3 / med / 1e9, samples=len(times[rec["variant"]]),
                                   vs_torch=anchor / med)
                    print(f"{n:5} {dtype:8} {layout} {rec['variant']:10} {rec.get('median_ms', float('nan')):8.3f} ms "
                          f"{rec.get('tflops', float('nan')):6.1f} TFLOP/s x{rec.get('vs_torch', float('nan')):.3f} "
                          f"rel.err {rec['relative_error']:.2e} {rec['status']}", flush=True)
                with open(args.out / "cluster_vs_cublas.jsonl", "a") as f:
                    f.writelines(json.dumps(r) + "\n" for r in rows)
                a = b = good = None
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
