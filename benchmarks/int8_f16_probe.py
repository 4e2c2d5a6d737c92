"""A quick probe (under a minute on an H200): tensorcore-int's small-M program on the 16-bit tensor
cores (products "fp16" and "fp16-swap": exact float32 chunks flushed into int32) against the
same program on the int8 ones (the module's tables in force) and torch._int_mm given B as
(N, K).T, kernels alone, B in both layouts.

    PYTHONPATH=src:benchmarks TRITON_DEFAULT_FP_FUSION=1 python3 benchmarks/int8_f16_probe.py [--out DIR]

Problems: M in --ms times (K, N) of SHAPES; A (M, K) row-major, B the weight (N, K) given as its
.T ("col") or row-major (K, N) ("row"). Variants: `_int_mm` (B col; for M <= 16, which it refuses,
A padded to 32 rows, the padding counted), `int8 col|row` (the small-M program at the tables'
tiles), and each of PROBE_TILES for M's class in both layouts. Every answer is checked exactly
against a float64 product on the GPU before anything is timed; a wrong one is reported and not
timed. Timing: --rounds interleaved rounds (the order rotated), each a block of --block launches
back to back between CUDA events (after --prewarm seconds of products); the median a launch.
This measures kernels, not whole calls: the bar (benchmarks/int8_small_m.py) is whole calls.
The programs are compiled first in --jobs processes.
"""
from __future__ import annotations

import torch

from tilemm.ladder.tensorcore import r11_int8_small_m as small_m

import harness

SHAPES = [(8192, 3072), (3584, 5376), (4096, 14336)]          # (K, N)
MS = [16, 32, 64, 100, 128, 256]
# the 16-bit candidates tried a class of M (as the small-M tables' rows; the class: M up to it)
PROBE_TILES = {
    16: [(16, 64, 128, 4, 4, 1, "fp16-swap"), (16, 128, 64, 4, 6, 1, "fp16-swap")],
    32: [(32, 64, 128, 4, 4, 1, "fp16-swap"), (32, 128, 64, 4, 5, 1, "fp16-swap"), (32, 128, 64, 4, 5, 1, "fp16")],
    64: [(64, 64, 128, 4, 4, 1, "fp16-swap"), (64, 128, 64, 8, 5, 1, "fp16-swap"), (64, 128, 64, 8, 5, 2, "fp16-swap"),
         (64, 128, 128, 8, 4, 1, "fp16")],
    None: [(128, 128, 64, 8, 4, 1, "fp16-swap"), (256, 64, 64, 8, 4, 1, "fp16-swap"), (128, 64, 64, 4, 4, 2, "fp16-swap"),
           (128, 128, 64, 8, 4, 1, "fp16")],
}


def class_of(m: int):
    return next((rows for rows in PROBE_TILES if rows is not None and m <= rows), None)


def operands(m: int, k: int, n: int) -> tuple:
    """A, {layout: B} and the exact product, int8 values from seeds of the sizes."""
    a, weight = harness.int8_operands(m, n, k)
    return a, {"col": weight.T, "row": weight.T.contiguous()}, a.double() @ weight.double().T


def launches(a, bs: dict) -> dict:
    """label -> (a launch without arguments, C it writes): the small-M program at the tables'
    tiles and at each of PROBE_TILES for M's class, both layouts."""
    m = a.shape[0]
    found = {}
    for layout, b in bs.items():
        for tiles in [None] + PROBE_TILES[class_of(m)]:
            c = torch.full((m, b.shape[1]), -7, dtype=torch.int32, device="cuda")
            label = f"int8 {layout}" if tiles is None else f"{tiles[6]} {tiles[:5]} {layout}"
            found[label] = (small_m.launcher(a, b, c, tiles=tiles), c)
    return found


def warm(task: tuple) -> None:
    """Compile (run once) every launch of the problems of M rows with B in this layout (a
    worker's share: (m, layout))."""
    m, layout = task
    for k, n in SHAPES:
        a, bs, _ = operands(m, k, n)
        for launch, _ in launches(a, {layout: bs[layout]}).values():
            launch()
    torch.cuda.synchronize()


def main():
    args = harness.parse(harness.parser(__doc__.splitlines()[0], out_required=False, ms=list(MS), rounds=5, block=20,
                                        jobs=12, prewarm=2.0))
    if args.jobs > 1:            # Triton compiles one program at a time a process; its disk cache serves this one
        import concurrent.futures
        import multiprocessing
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(warm, [(m, layout) for m in args.ms for layout in ("col", "row")]))
    stamp = harness.stamp("int8_f16_probe.py", args)
    harness.prewarm(args.prewarm, "float32")
    records = []
    for k, n in SHAPES:
        for m in args.ms:
            a, bs, reference = operands(m, k, n)
            calls, wrong = {}, []
            anchor = harness.int_mm_call(a, bs["col"])
            if torch.equal(anchor().double(), reference):
                calls["_int_mm"] = anchor
            else:
                wrong.append("_int_mm")
            for label, (launch, c) in launches(a, bs).items():
                launch()
                if torch.equal(c.double(), reference):
                    calls[label] = launch
                else:
                    wrong.append(label)
            us = harness.medians(harness.rounds(calls, args.rounds, lambda call: harness.block_us(call, args.block)))
            base = us.get("_int_mm", float("nan"))
            best = {layout: min(((t, label) for label, t in us.items() if label.endswith(layout) and
                                 not label.startswith("int8")), default=(float("nan"), "none    "))
                    for layout in ("col", "row")}
            record = {"m": m, "n": n, "k": k, "us": {label: round(t, 2) for label, t in us.items()},
                      "vs_int_mm": {label: round(base / t, 3) for label, t in us.items() if label != "_int_mm"},
                      "wrong": wrong, **stamp}
            records.append(record)
            print(f"{m:4} x {n:5} x {k:5}  _int_mm {base:6.1f}"
                  + "".join(f"  int8 {layout} {us[f'int8 {layout}']:6.1f}" for layout in ("col", "row")
                            if f"int8 {layout}" in us)
                  + "".join(f"  best 16-bit {layout} {t:6.1f} x{base / t:.2f} ({label[:-4]})" for layout, (t, label)
                            in best.items())
                  + (f"  WRONG {wrong}" if wrong else ""), flush=True)
    for layout in ("col", "row"):      # a layout's best 16-bit candidate a problem, and the int8 tables
        for name, pick in (("best 16-bit", lambda r: max((x for label, x in r["vs_int_mm"].items()
                                                          if label.endswith(layout) and not label.startswith("int8")),
                                                         default=None)),
                           ("int8 tables", lambda r: r["vs_int_mm"].get(f"int8 {layout}"))):
            ratios = [x for x in map(pick, records) if x is not None]
            if ratios:
                print(f"{layout} {name}: x _int_mm min {min(ratios):.3f} geomean {harness.geomean(ratios):.3f} "
                      f"under 1.0: {sum(x < 1.0 for x in ratios)} of {len(ratios)}", flush=True)
    if args.out is not None:
        harness.append(args.out / "int8_f16_probe.jsonl", records)


if __name__ == "__main__":
    main()
