"""The bar "small calls as cheap as torch's": tilemm.matmul(a, b), the default kernel as a user
calls it, against torch.matmul(a, b) (TF32 off, so float32 is SGEMM on both sides) over a sweep
of small products on torch CUDA tensors: M, N, K from 1 up (named sizes such as 1, 2, 3, 7, 31,
33, 100, 112, 275, 1000, 2560, 3000 and log-uniform draws, odd ones among them), at most
--max-flops (2MNK) a product, the four layouts of (A, B) (a row-major matrix or a transposed view
of one), bfloat16, float16, float32 and float64.

    PYTHONPATH=src python3 benchmarks/small_calls.py --out DIR [--half fit|held-out|all]

The sweep is the same for a --seed, and each shape (M, N, K) belongs to one half, fit or
held-out, by a hash of it: a rule tuned on the fit half is judged on the held-out half, which
shares no shape with it. Both answers are checked against a float64 reference first; a wrong
tilemm answer is recorded and not timed. Timing: whole calls, wall time per call over a block
of calls (the result allocated by the call, one synchronization at the block's end), blocks
sized to ~--block-ms, interleaved rounds (which goes first alternates), the median over rounds;
ratio = torch_us / tilemm_us (above 1: tilemm is faster). One extra line: tensorcore-f32 at 512^3
per call against torch.matmul, whose bar is at most 1.5x torch's time.

--outs: both calls write into an out made once a problem (tilemm.matmul(a, b, out=y) against
torch.matmul(a, b, out=y)), a loop that keeps its buffers; the out is filled with NaN before the
answers are checked. Records carry "outs": true.
"""
from __future__ import annotations

import json
import math
import statistics
import time
import zlib
from typing import NamedTuple

import numpy as np
import torch

import tilemm
from tilemm.numerics.accuracy import compare_on_device
from tilemm.system.timing import paired_ratio

import harness

LAYOUTS = ("nn", "tn", "nt", "tt")
DTYPES = ["bfloat16", "float16", "float32", "float64"]
HALVES = ("fit", "held-out", "all")
# sizes users meet: tiny ones, odd primes, near powers of two, and model widths
NAMED = (1, 2, 3, 5, 7, 11, 13, 17, 31, 33, 64, 97, 100, 112, 127, 128, 256, 257, 275, 512, 1000, 1024,
         2048, 2560, 3000, 4096, 8192)
MAX_DIM = 16384
SLOW = 0.97                  # a ratio under this counts as tilemm slower than torch
EXTRA = ("tensorcore-f32", "float32", 512, 1.5)     # kernel, dtype, size, bar (tilemm's time / torch's at most)


class Problem(NamedTuple):
    dtype: str
    m: int
    n: int
    k: int
    layout: str
    half: str


def half_of(m: int, n: int, k: int) -> str:
    """The shape's half, whatever the dtype, layout or seed: a shape is never in both."""
    return "fit" if zlib.crc32(f"{m}x{n}x{k}".encode()) % 2 == 0 else "held-out"


def draw_dim(rng: np.random.Generator) -> int:
    if rng.random() < 0.4:
        return int(NAMED[rng.integers(len(NAMED))])
    d = int(round(math.exp(rng.uniform(0, math.log(MAX_DIM)))))
    return d | 1 if rng.random() < 0.5 else d & ~1 or 1          # half of them odd


def sweep(seed: int, dtypes, count: int, max_flops: float = 1e10, half: str = "all") -> list[Problem]:
    """`count` distinct problems a dtype (half of them in each half; a dtype's problems do not
    depend on which other dtypes are asked for), those of `half` only unless it is 'all'."""
    found = []
    for dtype in dtypes:
        rng = np.random.default_rng([seed, zlib.crc32(dtype.encode())])
        wanted = {"fit": count // 2, "held-out": count - count // 2}
        seen = set()
        for _ in range(1000 * count):
            if not any(wanted.values()):
                break
            m, n, k = draw_dim(rng), draw_dim(rng), draw_dim(rng)
            layout = LAYOUTS[rng.integers(len(LAYOUTS))]
            side = half_of(m, n, k)
            if 2 * m * n * k > max_flops or (m, n, k, layout) in seen or not wanted[side]:
                continue
            seen.add((m, n, k, layout))
            wanted[side] -= 1
            found.append(Problem(dtype, m, n, k, layout, side))
    return [p for p in found if half in ("all", p.half)]


def operands(p: Problem, seed: int):
    """A (m, k) and B (k, n) on the GPU, random normal, each a transposed view where the layout says 't'."""
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{seed} {p}".encode()))
    return harness.operand(p.m, p.k, p.layout[0], p.dtype, g), harness.operand(p.k, p.n, p.layout[1], p.dtype, g)


def checked(call, a, b, dtype: str) -> tuple[bool, str]:
    try:
        verdict = compare_on_device(call(), a, b, dtype)
    except Exception as e:                          # a refusal is a failed answer, not the sweep's end
        return False, f"{type(e).__name__}: {e}"
    return verdict.ok, verdict.message


def planned(a, b, kernel) -> str | None:
    """The name of the kernel tilemm's plan runs (None where it refuses the call)."""
    try:
        return tilemm.plan(a, b, kernel=kernel).kernel.name
    except Exception:
        return None


def time_rounds(calls: dict, rounds: int, block_ms: float) -> tuple[dict, int]:
    """{label: [microseconds per call, one a round]} and the calls in a block: the same count for
    every label, sized so the slowest's block takes ~block_ms; the first label first in even rounds."""
    for call in calls.values():
        call()
    slowest = max(harness.wall_us(call, 5) for call in calls.values())
    count = int(min(max(block_ms * 1e3 / slowest, 3), 5000))
    return harness.rounds(calls, rounds, lambda call: harness.wall_us(call, count)), count


def measure(a, b, dtype: str, kernel, rounds: int, block_ms: float, outs: bool = False) -> dict:
    """One problem's fields: both answers checked, then both timed if tilemm's is right; with
    outs, both calls writing into one out (poisoned with NaN before each check)."""
    params = {} if kernel is None else {"kernel": kernel}
    if outs:
        y = torch.matmul(a, b)
        tilemm_call = lambda: tilemm.matmul(a, b, out=y, **params)     # noqa: E731
        torch_call = lambda: torch.matmul(a, b, out=y)                 # noqa: E731
        for _ in range(2):                 # the first call's path, then a repeated call's (the one timed)
            ok, message = checked(lambda: (y.fill_(float("nan")), tilemm_call())[1], a, b, dtype)
            if not ok:
                break
        torch_ok, torch_message = checked(lambda: (y.fill_(float("nan")), torch_call())[1], a, b, dtype)
    else:
        tilemm_call = lambda: tilemm.matmul(a, b, **params)             # noqa: E731
        torch_call = lambda: torch.matmul(a, b)                        # noqa: E731
        ok, message = checked(tilemm_call, a, b, dtype)
        torch_ok, torch_message = checked(torch_call, a, b, dtype)
    rec = {"kernel": planned(a, b, kernel), "answer_ok": ok, "torch_answer_ok": torch_ok}
    if not torch_ok:
        rec["torch_check"] = torch_message
    if not ok:
        return {**rec, "check": message, "tilemm_us": None, "torch_us": None, "ratio": None}
    times, count = time_rounds({"tilemm": tilemm_call, "torch": torch_call}, rounds, block_ms)
    tilemm_us, torch_us = statistics.median(times["tilemm"]), statistics.median(times["torch"])
    return {**rec, "tilemm_us": tilemm_us, "torch_us": torch_us, "ratio": torch_us / tilemm_us,
            "paired_ratio": paired_ratio([[t] for t in times["torch"]], [[t] for t in times["tilemm"]]),
            "calls_per_block": count}


def summary(records: list[dict]) -> list[str]:
    """Lines a dtype, for each half present and for both together: the geometric mean of the
    ratio, how many under SLOW, how many wrong, and the lowest 5."""
    lines = []
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        mine = [r for r in records if r["dtype"] == dtype]
        halves = [h for h in ("fit", "held-out") if any(r["half"] == h for r in mine)]
        for half in halves + (["all"] if len(halves) > 1 else []):
            rs = [r for r in mine if half in ("all", r["half"])]
            timed = [r for r in rs if r["ratio"] is not None]
            line = f"{dtype:9} {half:8} {len(timed):3} timed  wrong: {len(rs) - len(timed)}"
            if timed:
                line += (f"  geomean {harness.geomean(r['ratio'] for r in timed):5.2f}x"
                         f"  under {SLOW}x: {sum(r['ratio'] < SLOW for r in timed)}")
            lines.append(line)
            lines += [f"    {r['ratio']:5.2f}x  {r['m']}x{r['n']}x{r['k']} {r['layout']}  {r['kernel']}"
                      f"  ({r['tilemm_us']:.1f} us vs {r['torch_us']:.1f} us)"
                      for r in sorted(timed, key=lambda r: r["ratio"])[:5]]
    return lines


def problem_line(rec: dict) -> str:
    shape = f"{rec['m']}x{rec['n']}x{rec['k']} {rec['layout']}"
    if rec["ratio"] is None:
        return f"{rec['dtype']:9} {shape:24} {rec['half']:8} WRONG ANSWER: {rec['check']}"
    return (f"{rec['dtype']:9} {shape:24} {rec['half']:8} tilemm {rec['tilemm_us']:9.1f} us  torch {rec['torch_us']:9.1f} us"
            f"  {rec['ratio']:5.2f}x  {rec['kernel']}{'' if rec['torch_answer_ok'] else '  (torch: wrong answer)'}")


def main():
    args = harness.arguments(n=0, seed=2029, count=40, dtypes=list(DTYPES), half="all", rounds=5, block_ms=10.0,
                                max_flops=1e10, prewarm=3.0, outs=False)
    if args.half not in HALVES:
        raise SystemExit(f"--half: one of {', '.join(HALVES)}")
    stamp = harness.stamp("small_calls.py", args)
    torch.backends.cuda.matmul.allow_tf32 = False           # torch's float32 is SGEMM, as tilemm's default
    problems = sweep(args.seed, args.dtypes, args.count, args.max_flops, args.half)
    print(f"{len(problems)} problems (seed {args.seed}, half {args.half})", flush=True)
    harness.prewarm(args.prewarm, "float32")
    records = []
    started = time.perf_counter()
    with open(args.out / "small_calls.jsonl", "a") as f:
        for p in problems:
            a, b = operands(p, args.seed)
            rec = {"case": "sweep", **p._asdict(),
                   **measure(a, b, p.dtype, None, args.rounds, args.block_ms, args.outs), "rounds": args.rounds, "seed": args.seed, "outs": args.outs, **stamp}
            del a, b
            records.append(rec)
            f.write(json.dumps(rec) + "\n")
            print(problem_line(rec), flush=True)
        kernel, dtype, size, bar = EXTRA
        a, b = operands(Problem(dtype, size, size, size, "nn", "extra"), args.seed)
        extra = {"case": "per-call", "dtype": dtype, "m": size, "n": size, "k": size, "layout": "nn", "half": "extra",
                 **measure(a, b, dtype, kernel, args.rounds, args.block_ms, args.outs), "rounds": args.rounds,
                 "bar": bar, "outs": args.outs, **stamp}
        if extra["ratio"] is not None:
            extra["within_bar"] = extra["tilemm_us"] <= bar * extra["torch_us"]
        f.write(json.dumps(extra) + "\n")
    print(f"--- {time.perf_counter() - started:.0f} s; torch_us / tilemm_us (above 1: tilemm faster)")
    print("\n".join(summary(records)))
    if extra["ratio"] is None:
        print(f"{kernel} {dtype} {size}^3: WRONG ANSWER: {extra['check']}")
    else:
        print(f"{kernel} {dtype} {size}^3: {extra['tilemm_us']:.1f} us a call, {1 / extra['ratio']:.2f}x torch's "
              f"{extra['torch_us']:.1f} us (bar {bar}x): {'met' if extra['within_bar'] else 'MISSED'}")

if __name__ == "__main__":
    main()
