"""`tensorcore-int` against the integer GEMMs a Python user has.

    PYTHONPATH=src python3 benchmarks/int_vs_baselines.py --out DIR

- int8 -> int32 (out_dtype="int32"), n = 8192, each of the four layouts of A and B ('t': a
  transposed view), against torch._int_mm with B given as (N, K).T (its fast layout). The
  rung's time includes its digit/transposition pass where it needs one.
- int32 and int64, n = 4096, against cupy.matmul.

Protocol: a pre-warm, then interleaved rounds (order rotated), CUDA events per launch, the
median. Every answer is checked before timing: int8 products against a float64 GEMM (exact:
|sums| < 2^53), int32/int64 against cupy.matmul and the first rows against NumPy on the host.
"""
from __future__ import annotations

import numpy as np
import torch

import tilemm
from tilemm.system.timing import interleaved_rounds

import harness

CONFIGS = {   # rung parameters to try besides the defaults, per case
    "int32-from-int8": [dict(num_stages=3)],
    "int32": [dict(num_stages=3)],
    "int64": [dict(num_stages=3)],
}


def operand(rng_seed, rows, cols, dtype, how):
    """Uniform over the dtype's range, seeded: the same operand for a seed in every run."""
    return harness.operand(rows, cols, how, dtype, torch.Generator(device="cuda").manual_seed(rng_seed))


def rung(a, b, out_dtype, **params):
    """(launch, result) of the rung at these parameters, run once (compiled); a configuration that
    the rung refuses or that fails to compile gives a result that fails the check, with the reason."""
    try:
        launch, result = tilemm.plan(a, b, kernel="tensorcore-int", out_dtype=out_dtype, **params).prepare(poison=True)
        launch()
    except Exception as e:  # noqa: BLE001 - reported as a FAILED row, the others still measured
        print(f"tensorcore-int {params}: {type(e).__name__}: {e}"[:300], flush=True)
        return (lambda: None), (lambda: torch.zeros(0, device="cuda"))
    return launch, result


def measure(case, launchers, results, reference, args, meta):
    torch.cuda.synchronize()
    records, good = [], {}
    for label, res in results.items():
        got = torch.as_tensor(res(), device="cuda")
        ok = got.shape == reference.shape and bool(torch.equal(got, reference))
        records.append({"case": case, "variant": label, "status": "ok" if ok else "FAILED", **meta})
        if ok:
            good[label] = launchers[label]
    times = interleaved_rounds(good, args.rounds, args.per_round)
    meds = harness.medians(times)
    anchor = meds.get("anchor")
    m, n, k = meta["m"], meta["n"], meta["k"]
    for rec in records:
        if rec["variant"] in times:
            med = meds[rec["variant"]]
            rec.update(median_ms=med, tops=2 * m * n * k / med / 1e9, samples=len(times[rec["variant"]]))
            if anchor:
                rec["vs_anchor"] = anchor / med
        print(f"{case:22} {rec['variant']:34} {rec.get('median_ms', float('nan')):8.3f} ms "
              f"{rec.get('tops', float('nan')):8.1f} TOPS  x{rec.get('vs_anchor', float('nan')):5.2f}  {rec['status']}",
              flush=True)
    return records


def main():
    args = harness.arguments(n8=8192, n=4096, rounds=3, per_round=0.3, prewarm=10.0, cases=["int8", "int32", "int64"])
    import cupy as cp
    base = harness.stamp("int_vs_baselines.py", args)
    harness.prewarm(args.prewarm, "float32")
    records = []
    if "int8" in args.cases:
        n = args.n8
        for layout in ("nn", "nt", "tn", "tt"):
            a = operand(1, n, n, "int8", layout[0])
            b = operand(2, n, n, "int8", layout[1])
            b_nk = b.T.contiguous()                        # _int_mm's fast layout: (N, K).T
            reference = (a.double() @ b.double()).to(torch.int32)     # exact: |sums| < 2^53
            launchers, results = {}, {}
            c_ref = torch._int_mm(a.contiguous(), b_nk.T)
            launchers["anchor"] = lambda a=a.contiguous(), bt=b_nk.T: torch._int_mm(a, bt)
            results["anchor"] = lambda c=c_ref: c
            for i, params in enumerate([{}] + CONFIGS["int32-from-int8"]):
                label = "tensorcore-int" + ("" if not params else "-" + "-".join(f"{v}" for v in params.values()))
                launchers[label], results[label] = rung(a, b, "int32", **params)
            meta = {"dtype": "int8", "out_dtype": "int32", "layout": layout, "m": n, "n": n, "k": n,
                    "anchor": "torch._int_mm(A, B as (N,K).T)", **base}
            records += measure(f"int8->int32 {layout}", launchers, results, reference, args, meta)
            del a, b, b_nk, reference, launchers, results, c_ref
            torch.cuda.empty_cache()
    for dtype in ("int32", "int64"):
        if dtype not in args.cases:
            continue
        n = args.n
        a, b = operand(3, n, n, dtype, "n"), operand(4, n, n, dtype, "n")
        a_cp, b_cp = cp.asarray(a), cp.asarray(b)
        c_cp = cp.matmul(a_cp, b_cp)
        rows = 8                                           # the first rows on the host, exactly
        host = np.matmul(a[:rows].cpu().numpy(), b.cpu().numpy())
        assert np.array_equal(cp.asnumpy(c_cp[:rows]), host), f"cupy.matmul {dtype} disagrees with NumPy"
        reference = torch.as_tensor(c_cp, device="cuda")
        launchers = {"anchor": lambda: cp.matmul(a_cp, b_cp)}
        results = {"anchor": lambda: c_cp}
        for params in [{}] + CONFIGS[dtype]:
            label = "tensorcore-int" + ("" if not params else "-" + "-".join(f"{v}" for v in params.values()))
            launchers[label], results[label] = rung(a, b, None, **params)
        meta = {"dtype": dtype, "layout": "nn", "m": n, "n": n, "k": n, "anchor": "cupy.matmul", **base}
        records += measure(dtype, launchers, results, reference, args, meta)
    harness.append(args.out / "int_vs_baselines.jsonl", records)


if __name__ == "__main__":
    main()
