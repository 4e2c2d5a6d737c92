"""Rung `tensorcore`'s cluster=True (two CTAs a 256 x 256 tile, B loaded once for both: Gluon,
Triton 3.9) against cuBLAS (torch.matmul), the rung's one-CTA defaults and tilemm's default.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/cluster_vs_cublas.py --out DIR \
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

import torch

import tilemm
from tilemm.engine.availability import gluon_multicast
from tilemm.system.timing import interleaved_rounds

import harness

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
    the GPU, within tilemm.numerics.accuracy's bound (harness.float64_check); each record carries its worst
    error over that bound and its max error relative to max |C|."""
    errors = {}

    def check(label, c):
        ok, over, errors[label] = harness.float64_check(c, a, b, dtype)
        return ok, over
    good, outcomes = harness.checked(calls, check)
    rows = [dict(base, variant=label, status="ok" if found.ok else "FAILED", error_over_bound=found.value,
                 relative_error=errors.get(label, float("nan"))) for label, found in outcomes.items()]
    return good, rows


def main():
    ap = harness.parser(sizes=[8192, 4096])
    ap.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["bfloat16"])
    ap.add_argument("--layouts", nargs="+", choices=["nn", "nt"], default=["nn", "nt"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=float, default=0.3)
    ap.add_argument("--prewarm", type=float, default=10.0)
    args = harness.parse(ap)
    stamp = harness.stamp("cluster_vs_cublas.py", args)
    if not gluon_multicast():
        print("cluster=True is not timed: this Triton's Gluon has no clusters", flush=True)
    harness.prewarm(args.prewarm, "float32")
    for n in args.sizes:
        for dtype in args.dtypes:
            for layout in args.layouts:
                g = torch.Generator(device="cuda").manual_seed(n)
                a = harness.operand(n, n, "n", dtype, g)
                b = harness.operand(n, n, layout[1], dtype, g)     # "t": B given as (N, K).T, columns contiguous
                base = dict(stamp, m=n, n=n, k=n, dtype=dtype, layout=layout)
                good, rows = checked(variants(a, b), a, b, dtype, base)
                times = interleaved_rounds(good, args.rounds, args.per_round)
                med = harness.medians(times)
                anchor = med.get("torch", float("nan"))
                for rec in rows:
                    if rec["variant"] in times:
                        ms = med[rec["variant"]]
                        rec.update(median_ms=ms, tflops=2 * n**3 / ms / 1e9, samples=len(times[rec["variant"]]),
                                   vs_torch=anchor / ms)
                    print(f"{n:5} {dtype:8} {layout} {rec['variant']:10} {rec.get('median_ms', float('nan')):8.3f} ms "
                          f"{rec.get('tflops', float('nan')):6.1f} TFLOP/s x{rec.get('vs_torch', float('nan')):.3f} "
                          f"rel.err {rec['relative_error']:.2e} {rec['status']}", flush=True)
                harness.append(args.out / "cluster_vs_cublas.jsonl", rows)
                a = b = good = None
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
