"""Complex products: the tilemm complex rung and the complex default against cuBLAS's CGEMM / ZGEMM.

    PYTHONPATH=src python3 benchmarks/complex_vs_library.py --out DIR               # headline + sweep
    PYTHONPATH=src python3 benchmarks/complex_vs_library.py --out DIR --no-sweep    # headline only

Whole calls as a user makes them, on torch CUDA tensors, interleaved rounds (order rotated each
round), CUDA events, the median:
- `cublas`: torch.matmul(a, b), TF32 off (CGEMM / ZGEMM themselves);
- `library`: tilemm.matmul(a, b, kernel="cublas"), the library rung (what the default's table is
  judged against, as tilemm.choose.by_shape's tables are);
- `default`: tilemm.matmul(a, b);
- `tensorcore-complex`: tilemm.matmul(a, b, kernel="tensorcore-complex") (the block form's one real
  product); for complex128 also `gauss`: products=3 (Gauss's three real products).
Every answer is checked before it is timed: within tilemm.numerics.accuracy's complex bound, and its
normwise error max|C - C128| / max|C128| against a complex128 product of the same operands
recorded beside CGEMM's (the bar: the rung's no larger). Headline: complex64 8192³ (bar: the rung
>= 1.8x CGEMM) and complex128 4096³ (>= 1.0x ZGEMM). The sweep: generated problems (M, N, K
log-uniform, a cap on the work, layouts nn / tn / nt), alternately fit and held-out; the fit half's
shape classes where the rung won (geometric mean >= 1.05x the library rung, none below 0.97x) are
printed as r14_complex.MEASURED_WINNERS entries, and the held-out half is reported as the default
would run with them. One JSON line a variant and problem in DIR/complex_vs_library.jsonl.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

import tilemm
from tilemm.choose import by_shape as choice
from tilemm.system import machine
from tilemm.numerics.accuracy import compare_on_device
from tilemm.system.timing import interleaved_rounds

import harness

HEADLINE = [("complex64", 8192, 8192, 8192, "nn"), ("complex128", 4096, 4096, 4096, "nn")]
# the sweep's largest product, in complex multiply-adds (a complex128 one of 2^35 takes ~0.5 s a call)
MAX_WORK = {"complex64": 2**36, "complex128": 2**34}


def variants(a, b) -> dict:
    """{label: whole call}."""
    calls = {"cublas": lambda: torch.matmul(a, b),
             "library": lambda: tilemm.matmul(a, b, kernel="cublas"),
             "default": lambda: tilemm.matmul(a, b),
             "tensorcore-complex": lambda: tilemm.matmul(a, b, kernel="tensorcore-complex")}
    if a.dtype == torch.complex128:
        calls["gauss"] = lambda: tilemm.matmul(a, b, kernel="tensorcore-complex", products=3)
    return calls


def checked(call, a, b, dtype: str, reference) -> dict:
    """The call's answer (into memory poisoned with NaN just before) against the bound and the
    complex128 reference."""
    poison = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=a.dtype, device="cuda")
    del poison
    c = call()
    torch.cuda.synchronize()
    verdict = compare_on_device(c, a, b, dtype)
    error = float((c.to(torch.complex128) - reference).abs().max() / reference.abs().max().clamp_min(1e-300))
    return {"ok": verdict.ok, "bound": verdict.message, "error": error}


def measure(dtype: str, m: int, n: int, k: int, layout: str, rounds: int, per_round: float, seed: int) -> list[dict]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a, b = harness.operand(m, k, layout[0], dtype, generator), harness.operand(k, n, layout[1], dtype, generator)
    reference = torch.matmul(a.to(torch.complex128), b.to(torch.complex128))
    calls = variants(a, b)
    checks = {label: checked(call, a, b, dtype, reference) for label, call in calls.items()}
    for label, found in checks.items():
        if not found["ok"]:
            print(f"  {label}: WRONG ANSWER ({found['bound']}); not timed", flush=True)
    timed = {label: call for label, call in calls.items() if checks[label]["ok"]}
    times = interleaved_rounds(timed, rounds, per_round)
    median = harness.medians(times)
    kernel_of_default = tilemm.plan(a, b).kernel.name
    records = []
    for label, ms in median.items():
        records.append(dict(dtype=dtype, m=m, n=n, k=k, layout=layout, variant=label, median_ms=ms,
                            tflops=8 * m * n * k / ms / 1e9, error=checks[label]["error"],
                            cublas_error=checks["cublas"]["error"], within_bound=checks[label]["bound"],
                            vs_cublas=median["cublas"] / ms if "cublas" in median else None,
                            vs_library=median["library"] / ms if "library" in median else None,
                            default_kernel=kernel_of_default, gpu=torch.cuda.get_device_name()))
    return records


def sweep_problems(seed: int, count: int) -> list[tuple]:
    """(dtype, m, n, k, layout, split): count problems a dtype, M, N, K log-uniform in [16, 8192]
    (half of them odd), scaled down to MAX_WORK, every other one held out."""
    rng = np.random.default_rng(seed)
    found = []
    for dtype in ("complex64", "complex128"):
        for i in range(count):
            m, n, k = (int(round(math.exp(rng.uniform(math.log(16), math.log(8192))))) for _ in range(3))
            shrink = max(1.0, (m * n * k / MAX_WORK[dtype]) ** (1 / 3))
            m, n, k = (max(1, int(d / shrink)) | int(rng.random() < 0.5) for d in (m, n, k))
            layout = ("nn", "tn", "nt")[rng.integers(3)]
            found.append((dtype, m, n, k, layout, "fit" if i % 2 == 0 else "held-out"))
    return found


def report_sweep(records: list[dict]) -> None:
    """The fit half's winning classes (as tilemm.choose.by_shape.winners judges them) and both halves' ratios."""
    rung = [r for r in records if r["variant"] == "tensorcore-complex" and r.get("vs_library")]
    capability = tuple(machine.gpu().compute_capability) if machine.gpu() else None
    table = {}
    gauss = [r for r in records if r["variant"] == "gauss" and r.get("vs_library")]
    for split in ("fit", "held-out"):
        mine = [r["vs_library"] for r in gauss if r["split"] == split]
        if mine:
            print(f"complex128 {split}: gauss (products=3) / library geomean {harness.geomean(mine):.3f} (min {min(mine):.3f})",
                  flush=True)
    for dtype in ("complex64", "complex128"):
        fit = [r for r in rung if r["dtype"] == dtype and r["split"] == "fit"]
        won = choice.winners(fit, rung="tensorcore-complex", against="vs_library")
        if won:
            table[(capability, dtype)] = won
        for split in ("fit", "held-out"):
            mine = [r for r in rung if r["dtype"] == dtype and r["split"] == split]
            picked = [r["vs_library"] if choice.record_class(r) in won else 1.0 for r in mine]
            print(f"{dtype} {split}: tensorcore-complex / library geomean {harness.geomean([r['vs_library'] for r in mine]):.3f}"
                  f" (min {min((r['vs_library'] for r in mine), default=float('nan')):.3f}); the default with the fit "
                  f"half's table: geomean {harness.geomean(picked):.3f}, min {min(picked, default=float('nan')):.3f} "
                  f"(assuming the library's own time where it stays)", flush=True)
        default = [r["vs_library"] for r in records if r["dtype"] == dtype and r["variant"] == "default"
                   and r.get("vs_library")]
        print(f"{dtype}: the default as shipped / library, every problem: geomean {harness.geomean(default):.3f}, "
              f"min {min(default, default=float('nan')):.3f}", flush=True)
    print(f"r14_complex.MEASURED_WINNERS = {table!r}", flush=True)


def parse_shape(text: str) -> tuple:
    """DTYPE:MxNxK:LAYOUT:SPLIT -> (dtype, m, n, k, layout, split)."""
    dtype, size, layout, split = text.split(":")
    m, n, k = (int(x) for x in size.split("x"))
    return dtype, m, n, k, layout, split


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=float, default=0.3)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--sweep-count", type=int, default=24, help="problems a dtype (half of them held out)")
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--shapes", nargs="*", default=None, metavar="DTYPE:MxNxK:LAYOUT:SPLIT",
                    help="these problems in place of the headline and the sweep, e.g. complex64:2048x2048x2048:nn:check")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False          # CGEMM as it is, not TF32's
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "complex_vs_library.jsonl"
    problems = [(*h, "headline") for h in HEADLINE]
    if args.shapes:
        problems = [parse_shape(text) for text in args.shapes]
    elif not args.no_sweep:
        problems += sweep_problems(args.seed, args.sweep_count)
    stamp = harness.stamp("complex_vs_library.py", args, env="")
    records = []
    with path.open("a") as f:
        for i, (dtype, m, n, k, layout, split) in enumerate(problems):
            print(f"{split} {dtype} {m}x{n}x{k} {layout}", flush=True)
            for r in measure(dtype, m, n, k, layout, args.rounds, args.per_round, args.seed + i):
                r["split"] = split
                r.update(stamp)
                records.append(r)
                f.write(json.dumps(r) + "\n")
                print(f"  {r['variant']:>19}: {r['median_ms']:9.3f} ms  {r['vs_cublas'] or 0:6.3f}x cublas  "
                      f"{r['vs_library'] or 0:6.3f}x library  error {r['error']:.2e} (CGEMM/ZGEMM "
                      f"{r['cublas_error']:.2e})", flush=True)
            torch.cuda.empty_cache()
    for dtype, m, n, k, layout in HEADLINE:
        for variant in ("tensorcore-complex", "gauss"):
            rung = next((r for r in records if r["split"] == "headline" and r["dtype"] == dtype
                         and r["variant"] == variant), None)
            if rung:
                bar = 1.8 if dtype == "complex64" else 1.0
                print(f"HEADLINE {dtype} {m}^3: {variant} {rung['vs_cublas']:.3f}x cuBLAS (bar {bar}x), error "
                      f"{rung['error']:.2e} against cuBLAS's {rung['cublas_error']:.2e}", flush=True)
    if not args.no_sweep and not args.shapes:
        report_sweep([r for r in records if r["split"] != "headline"])


if __name__ == "__main__":
    main()
