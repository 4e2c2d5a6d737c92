"""The fp8 bar: tilemm.scaled_matmul against torch._scaled_mm.

    PYTHONPATH=src TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/fp8_vs_scaled_mm.py --out DIR
    ... fp8_vs_scaled_mm.py --out DIR --wide fit held-out     # the two float32-sum programs, wide sweep

--wide: over the wide sweep's problems (tilemm.tools.bench.suites.wide_problems; A row-major, B as
(N, K).T), whole calls of the float32 sums' two programs, scaled_matmul(warp_specialized=False)
(`triton`) and (=True) (`gluon`), with _scaled_mm beside them where it takes the shape (multiples
of 16): the data of scaled_fp8.WARP_SPECIALIZED_FROM_K.

float8_e4m3fn, per-tensor scales, bfloat16 out, A row-major and B given as (N, K).T (the only
layout _scaled_mm takes; tilemm's B row-major case, which pays its transposition, is also timed).
The float32 sums' Gluon program is timed as asked for (warp_specialized=True) and, where Triton's
Gluon can (availability.gluon_multicast), in clusters of two CTAs (cluster=True). The anchor is
_scaled_mm as called by default (use_fast_accum=False); its fast-accumulation form runs beside it,
each matched against tilemm's same mode. Every variant's answer is checked against a float64
product of the same fp8 values first (within bfloat16's rounding plus the accumulator allowance of
tests/test_scaled.py), and its max relative error recorded. Protocol: pre-warm, then
interleaved rounds (order rotated), CUDA events, the median.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

import tilemm
from tilemm.engine.availability import gluon_multicast
from tilemm.system.timing import interleaved_rounds

import harness

CONFIGS = [dict(block_m=128, block_n=256), dict(block_m=256, block_n=128), dict(stream_k=True), dict(num_stages=3),
           dict(warp_specialized=False)]
# the float32 sums' Gluon program on one CTA a tile, and (where this Triton's Gluon can) in clusters
FLOAT32_SUMS_CONFIGS = [dict(warp_specialized=True), dict(cluster=True)]


def check(c, a, b, scale, fast, block_k=128):
    """(ok, max |C - C64| / max |C64|): C within bfloat16's rounding plus the fp8 accumulator's
    allowance (2^-13 of the sum's size per 32-deep add: block_k / 32 a K step, or all of them
    with fast)."""
    ref = (a.double() @ b.double()) * scale
    size = (a.double().abs() @ b.double().abs()) * abs(scale)
    k = a.shape[1]
    adds = -(-k // 32) if fast else block_k // 32
    return harness.within(c, ref, 2.0**-8 * ref.abs() + (2 * k * 2.0**-24 + adds * 2.0**-13) * size)


def wide(out: Path, splits: list, base: dict):
    """The --wide records (see the module's doc), one line a problem, every answer checked."""
    from tilemm.tools.bench.suites import wide_problems
    for p in wide_problems():
        if p.split not in splits:
            continue
        a = torch.randn(p.m, p.k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(p.n, p.k, device="cuda").to(torch.float8_e4m3fn).T
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
        launch = {"triton": lambda: tilemm.scaled_matmul(a, b, sa, sb, warp_specialized=False),
                  "gluon": lambda: tilemm.scaled_matmul(a, b, sa, sb, warp_specialized=True)}
        if p.m % 16 == 0 and p.n % 16 == 0 and p.k % 16 == 0:
            launch["scaled_mm"] = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        timed, outcomes = harness.checked(launch, lambda label, c: check(c, a, b, 1.0, False))
        errors = {label: found.value for label, found in outcomes.items()}
        for label in launch.keys() - timed.keys():
            print(p, label, "WRONG", errors[label], flush=True)
        times = harness.medians(interleaved_rounds(timed, 3, 0.08))
        with open(out / "fp8_programs_wide.jsonl", "a") as f:
            f.write(json.dumps(dict(base, m=p.m, n=p.n, k=p.k, kind=p.kind, split=p.split, ms=times,
                                    errors=errors)) + "\n")
        print(f"{p.split:8} {p.m:6}x{p.n:6}x{p.k:6} " + " ".join(
            f"{label} {t * 1e3:8.1f}us x{times['triton'] / t:.3f}" for label, t in times.items()), flush=True)


def main():
    ap = harness.parser()
    ap.add_argument("--wide", nargs="+", choices=["fit", "held-out"],
                    help="instead of the sizes: the two float32-sum programs over these halves of the wide sweep")
    ap.add_argument("--sizes", nargs="+", type=int, default=[8192, 4096])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=float, default=0.3)
    ap.add_argument("--prewarm", type=float, default=10.0)
    args = harness.parse(ap)
    base = harness.stamp("fp8_vs_scaled_mm.py", args)
    harness.prewarm(args.prewarm, "float32")
    if args.wide:
        return wide(args.out, args.wide, base)
    records = []
    for n in args.sizes:
        g = torch.Generator(device="cuda").manual_seed(n)
        a = torch.randn(n, n, generator=g, device="cuda").to(torch.float8_e4m3fn)
        b_nk = torch.randn(n, n, generator=g, device="cuda").to(torch.float8_e4m3fn)   # B^T, row-major
        b = b_nk.T                                               # B (K, N), columns contiguous
        b_row = b.contiguous()                                   # B (K, N), rows contiguous
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(4.0, device="cuda")   # scale 2
        variants = {
            "scaled_mm": (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), False),
            "scaled_mm-fast": (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True),
                               True),
            "tilemm": (lambda: tilemm.scaled_matmul(a, b, sa, sb), False),
            "tilemm-fast": (lambda: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=True), True),
            "tilemm-b-row-major": (lambda: tilemm.scaled_matmul(a, b_row, sa, sb), False),
        }
        for params in CONFIGS + FLOAT32_SUMS_CONFIGS:
            if params.get("cluster") and not gluon_multicast():
                continue
            label = "tilemm-" + "-".join(f"{k}={v}" for k, v in params.items())
            variants[label] = (lambda p=params: tilemm.scaled_matmul(a, b, sa, sb, **p), False, params)
            if params not in FLOAT32_SUMS_CONFIGS:
                variants[label + "-fast"] = (lambda p=params: tilemm.scaled_matmul(a, b, sa, sb, fast_accum=True, **p),
                                             True, params)
        fast_of = {label: fast for label, (_, fast, *_) in variants.items()}
        params_of = {label: (params[0] if params else {}) for label, (_, _, *params) in variants.items()}
        good, outcomes = harness.checked({label: launch for label, (launch, *_) in variants.items()},
                                         lambda label, c: check(c, a, b, 2.0, fast_of[label],
                                                                params_of[label].get("block_k", 128)))
        rows = [{"variant": label, "status": "ok" if found.ok else "FAILED", "fast_accum": fast_of[label],
                 "params": params_of[label], "relative_error": found.value, "m": n, "n": n, "k": n,
                 "dtype": "float8_e4m3fn", "out_dtype": "bfloat16", **base} for label, found in outcomes.items()]
        torch.cuda.synchronize()
        times = interleaved_rounds(good, args.rounds, args.per_round)
        meds = harness.medians(times)
        anchor = {False: meds["scaled_mm"], True: meds["scaled_mm-fast"]}
        for rec in rows:
            if rec["variant"] in times:
                med = meds[rec["variant"]]
                rec.update(median_ms=med, tflops=2 * n**3 / med / 1e9, samples=len(times[rec["variant"]]),
                           vs_scaled_mm=anchor[False] / med, vs_scaled_mm_same_accum=anchor[rec["fast_accum"]] / med)
            print(f"{n:5} {rec['variant']:28} {rec.get('median_ms', float('nan')):7.3f} ms "
                  f"{rec.get('tflops', float('nan')):7.1f} TFLOP/s  x{rec.get('vs_scaled_mm', float('nan')):5.3f} "
                  f"(same accum x{rec.get('vs_scaled_mm_same_accum', float('nan')):5.3f})  "
                  f"rel.err {rec['relative_error']:.2e}  {rec['status']}", flush=True)
        records += rows
        variants = good = None                                   # frees this size's operands
        torch.cuda.empty_cache()
    harness.append(args.out / "fp8_vs_scaled_mm.jsonl", records)


if __name__ == "__main__":
    main()
