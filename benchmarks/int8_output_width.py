"""Issue 8 question: is the int8 product slower than the fp8 one because of C? Times int8 data with
A row-major and B as (N, K).T (no transposition) into exact int32 C (out_dtype="int32") and into
NumPy's wrapped int8 C (a quarter of the bytes), with torch._int_mm as the anchor, 8192³.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/int8_output_width.py --out DIR
"""
from __future__ import annotations

import json
import statistics

import torch

import tilemm
from tilemm import machine
from tilemm.timing import interleaved_rounds

import gpu_ladder  # noqa: E402  (pre-warm)
from int_vs_baselines import operand  # noqa: E402  (random full-range operands)


def main():
    args = gpu_ladder.out_and_n()
    n = args.n
    a = operand(1, n, n, "int8", "n")
    b = operand(2, n, n, "int8", "t")                    # (N, K).T
    exact = torch._int_mm(a, b)
    wrapped = exact.to(torch.int8)                       # two's complement: NumPy's int8 result
    launchers, checks = {"anchor": lambda: torch._int_mm(a, b)}, {}
    for label, out_dtype, want in (("int32-C", "int32", exact), ("int8-C", None, wrapped)):
        launchers[label], result = tilemm.plan(a, b, kernel="tensorcore-int", out_dtype=out_dtype).prepare(poison=True)
        launchers[label]()
        torch.cuda.synchronize()
        checks[label] = bool(torch.equal(torch.as_tensor(result()), want))
    gpu_ladder.prewarm(8)
    good = {k: v for k, v in launchers.items() if k == "anchor" or checks[k]}
    times = interleaved_rounds(good, 4, 0.3)
    anchor = statistics.median(times["anchor"])
    stamp = machine.stamp("PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/int8_output_width.py")
    records = []
    for label in launchers:
        rec = {"variant": label, "status": "ok" if label == "anchor" or checks[label] else "FAILED", "m": n, "n": n,
               "k": n, **stamp}
        if label in times:
            med = statistics.median(times[label])
            rec.update(median_ms=med, tops=2 * n**3 / med / 1e9, vs_int_mm=anchor / med)
        records.append(rec)
        print(f"{label:8} {rec.get('median_ms', float('nan')):7.3f} ms {rec.get('tops', float('nan')):7.1f} TOPS "
              f"x{rec.get('vs_int_mm', float('nan')):5.2f} {rec['status']}", flush=True)
    with open(args.out / "int8_output_width.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


if __name__ == "__main__":
    main()
