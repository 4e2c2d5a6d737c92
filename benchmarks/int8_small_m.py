"""The default on int8 -> exact int32 products of real layers' weights, M from 1 to 1024, against
torch._int_mm (cuBLASLt's int8 GEMM): the bar is 0.97x _int_mm or better on every problem.

    PYTHONPATH=src python3 benchmarks/int8_small_m.py --out DIR [--set fit|held-out|all]

Problems: M in --ms, times (N, K) of a set: `fit`, the layers the default's rule was set on
(tilemm.choose.by_shape.int8_library_wins), and `held-out`, other layers', never looked at while setting it.
A is (M, K) row-major, B the weight as torch.nn.Linear keeps it, (N, K), given as its .T: _int_mm's
fast layout. Variants, each a whole call as a user makes it:

- default: tilemm.matmul(a, b, out_dtype="int32"), its plan cached after the first call;
- _int_mm: torch._int_mm(a, b); for M <= 16, which it refuses, A padded to 32 rows first
  (a.new_zeros(32, K), a copy in, the product's first M rows): the padding counted;
- library: tilemm's library rung named (kernel="cublas", torch._int_mm in its own way);
- tensorcore-int: the rung named, its program chosen by the rung's rule;
- small-m: the rung's small-M program (small_m=True: small tiles, K split to fill the GPU);
- rung-tiles: the rung's 128 x 256 tiles (small_m=False).

Every answer is checked exactly against a float64 product (|sums| < 2^53) before anything is
timed. Timing, the bar's measure: CUDA events around each call, the GPU idle before it (so a call's
CPU cost counts, as a user waiting on one call pays it), in interleaved rounds (the order rotated
each round), the median of all of a variant's calls. Besides, each round times a block of --block
calls back to back by wall clock, one synchronize at the end (`*_wall_*`: a loop of calls, where a
call's CPU cost hides behind the GPU's work on the one before, if that is longer). One JSON line a
problem (the ratios are _int_mm's time over the variant's: above 1 is faster), then a summary line
a set, for both measures: the default's lowest ratio, geometric mean and the problems under 0.97x.
"""
from __future__ import annotations

import json

import torch

import tilemm
from tilemm.ladder.tensorcore import r11_int8_small_m as small_m
from tilemm.engine.availability import multiprocessors

import harness

FIT = [(3584, 18944), (3072, 8192), (8192, 6144), (7168, 18432), (2048, 2048), (4096, 14336), (28672, 4096)]
HELD_OUT = [(4096, 4096), (1024, 4096), (14336, 4096), (11008, 4096), (4096, 11008), (5120, 5120), (13824, 5120),
            (18944, 3584), (2560, 2048), (6144, 4096), (5120, 13824), (8192, 28672)]
SETS = {"fit": FIT, "held-out": HELD_OUT}
MS = [1, 2, 3, 5, 8, 13, 16, 17, 24, 33, 64, 100, 128, 200, 256, 384, 512, 768, 1024]
BAR = 0.97
PADDED_ROWS = 32          # the baseline's padding of A where _int_mm refuses M <= 16


def variants(a, b):
    """label -> a whole call giving A @ B in int32."""
    m, k = a.shape
    if m > 16:
        int_mm = (lambda: torch._int_mm(a, b))
    else:
        def int_mm():
            padded = a.new_zeros(PADDED_ROWS, k)
            padded[:m] = a
            return torch._int_mm(padded, b)[:m]
    return {"default": lambda: tilemm.matmul(a, b, out_dtype="int32"),
            "_int_mm": int_mm,
            "library": lambda: tilemm.matmul(a, b, out_dtype="int32", kernel="cublas"),
            "tensorcore-int": lambda: tilemm.matmul(a, b, out_dtype="int32", kernel="tensorcore-int"),
            "small-m": lambda: tilemm.matmul(a, b, out_dtype="int32", kernel="tensorcore-int", small_m=True),
            "rung-tiles": lambda: tilemm.matmul(a, b, out_dtype="int32", kernel="tensorcore-int", small_m=False)}


def measure(calls: dict, rounds: int, per_round: int, block: int) -> tuple:
    """({label: [µs of each call, CUDA events]}, {label: [µs a call of each block]}): interleaved
    rounds, the order rotated each round, each round per_round timed calls and a block of calls
    of each variant."""
    time_us = harness.event_timer()

    def both(call):
        return [time_us(call) for _ in range(per_round)], harness.wall_us(call, block)
    found = harness.rounds(calls, rounds, both)
    return ({label: [t for events, _ in each for t in events] for label, each in found.items()},
            {label: [wall for _, wall in each] for label, each in found.items()})


def problem(set_name, m, n, k, b, b64, args, stamp) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(m * 7919 + n * 31 + k)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=gen)
    reference = a.double() @ b64                                  # exact: |sums| <= K * 2^14 < 2^53
    calls, wrong = variants(a, b), []
    for label, call in list(calls.items()):                      # compiles, and checks every answer
        c = call()
        if not (c.dtype == torch.int32 and c.shape == reference.shape and torch.equal(c.double(), reference)):
            wrong.append(label)
            del calls[label]
    times, blocks = measure(calls, args.rounds, args.per_round, args.block)
    us, wall = harness.medians(times), harness.medians(blocks)
    base, wall_base = us.get("_int_mm"), wall.get("_int_mm")
    record = {"set": set_name, "m": m, "n": n, "k": k, "layout": "A row-major, B (N, K).T",
              "default_kernel": tilemm.plan(a, b, out_dtype="int32").kernel.name,
              "rung_tiles": -(-m // 128) * -(-n // 256),
              "rung_program": "small-m" if small_m.preferred(m, n, k, multiprocessors()) else "rung tiles",
              "int_mm_form": "as it is" if m > 16 else f"A padded to {PADDED_ROWS} rows (new_zeros, copy, slice: counted)",
              **{f"{label}_us": round(t, 2) for label, t in us.items()},
              **{f"{label}_vs_int_mm": round(base / t, 4) for label, t in us.items() if base and label != "_int_mm"},
              **{f"{label}_wall_us": round(t, 2) for label, t in wall.items()},
              **{f"{label}_wall_vs_int_mm": round(wall_base / t, 4) for label, t in wall.items()
                 if wall_base and label != "_int_mm"},
              "samples": min(len(ts) for ts in times.values()), "blocks": args.rounds, "block_calls": args.block,
              "wrong": wrong, **stamp}
    print(f"{set_name:8} {m:5} x {n:5} x {k:5}  {record['default_kernel']:14}"
          + "".join(f"  {label} {t:7.1f}" for label, t in us.items())
          + f"  default x{record.get('default_vs_int_mm', float('nan')):.3f}"
          + f" (wall x{record.get('default_wall_vs_int_mm', float('nan')):.3f})" + (f"  WRONG {wrong}" if wrong else ""),
          flush=True)
    return record


def summary(set_name: str, records: list[dict], stamp: dict) -> dict:
    """The set's figures: CUDA events (the bar's measure) and, besides, blocks of calls."""
    line = {"summary": set_name, "problems": len(records), "wrong": sum(bool(r["wrong"]) for r in records), "bar": BAR}
    for measure_name, key in (("events", "default_vs_int_mm"), ("blocks", "default_wall_vs_int_mm")):
        ratios = [r[key] for r in records if key in r]
        line[measure_name] = {
            "timed": len(ratios), "min": min(ratios, default=None),
            "geomean": harness.geomean(ratios) if ratios else None,
            "under_bar": sum(x < BAR for x in ratios),
            "problems_under_bar": [(r["m"], r["n"], r["k"], r["default_kernel"], r[key]) for r in records
                                   if r.get(key, BAR) < BAR]}
    line["default_kernels"] = {name: sum(r["default_kernel"] == name for r in records)
                               for name in sorted({r["default_kernel"] for r in records})}
    print(json.dumps({"summary": set_name, **{name: {k: v for k, v in line[name].items() if k != "problems_under_bar"}
                                              for name in ("events", "blocks")},
                      "default_kernels": line["default_kernels"]}), flush=True)
    return {**line, **stamp}


def main():
    args = harness.arguments(n=0, set="all", ms=list(MS), rounds=5, per_round=8, block=20, prewarm=5.0)
    if args.set not in ("fit", "held-out", "all"):
        raise SystemExit(f"--set: fit, held-out or all, not {args.set!r}")
    stamp = harness.stamp("int8_small_m.py", args)
    harness.prewarm(args.prewarm, "float32")
    path = args.out / "int8_small_m.jsonl"
    for set_name in (["fit", "held-out"] if args.set == "all" else [args.set]):
        records = []
        for n, k in SETS[set_name]:
            gen = torch.Generator(device="cuda").manual_seed(n * 131 + k)
            weight = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=gen)
            b, b64 = weight.T, weight.T.double()
            for m in args.ms:
                records.append(problem(set_name, m, n, k, b, b64, args, stamp))
                with open(path, "a") as f:
                    f.write(json.dumps(records[-1]) + "\n")
            del weight, b, b64
            tilemm.release_memory()
            torch.cuda.empty_cache()
        with open(path, "a") as f:
            f.write(json.dumps(summary(set_name, records, stamp)) + "\n")


if __name__ == "__main__":
    main()
