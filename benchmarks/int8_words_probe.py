"""A quick probe (under 4 minutes on an H200): tensorcore-int's small-M program with a row-major B
turned over in registers a word at a time (products "int8-words", its words staged by Triton's
pipeline, and "int8-words-ahead", the next step's words in registers) against the byte program the
tables run now and torch._int_mm given B as (N, K).T, kernels alone.

    PYTHONPATH=src:benchmarks python3 benchmarks/int8_words_probe.py --out /tmp/w.jsonl [--ms 32 64 ...]

Problems: M in --ms times (N, K) of SHAPES; A (M, K) row-major, B the weight (N, K) as a row-major
(K, N) array. Variants: `_int_mm` (given the weight's .T, its fast layout; A padded to a multiple
of 8 rows should torch refuse it as it is), `rows` (the small-M program at the tables' tiles for a
row-major B: what tilemm runs now), and each of WORDS_TILES for M's class on both words products,
with the runs of split K the launch picks (`auto`) and, where that is more than one, with none
(`1`). Every answer is checked exactly against torch._int_mm's int32 product before anything is
timed; a wrong or failing one is reported and not timed. Timing: --rounds interleaved rounds (the
order rotated), each a block of --block launches back to back between CUDA events (with --graphs,
a CUDA graph of them: launches back to back are paced by the host where a kernel takes under 20 µs
or so; the record was timed without), after --prewarm seconds of products; the median a launch.
The programs are compiled first in --jobs processes (Triton's disk cache serves this one after).
One line a problem: the times, and the best words variant with its ratio to `_int_mm` and to
`rows` (above 1 is faster); a JSON line a problem appended to --out, and a summary line.
"""
from __future__ import annotations

import json

import torch

from tilemm.engine import availability
from tilemm.ladder.tensorcore import r11_int8_small_m as small_m

import harness

SHAPES = [(4096, 4096), (5376, 3584), (3072, 8192), (11008, 4096), (4096, 14336)]      # (N, K)
MS = [32, 64, 100, 128, 200, 256]
WORDS = ("int8-words", "int8-words-ahead")
# the words candidates a class of M (M up to the key):
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, programs an SM)
WORDS_TILES = {
    32: [(32, 128, 64, 4, 5, 1), (32, 128, 128, 4, 4, 1), (32, 64, 128, 4, 4, 1), (32, 256, 64, 8, 4, 1)],
    64: [(64, 128, 128, 4, 4, 1), (64, 128, 64, 4, 5, 1), (64, 64, 128, 4, 4, 1), (64, 256, 64, 8, 4, 1)],
    None: [(128, 128, 128, 8, 4, 1), (128, 64, 128, 4, 4, 1), (64, 128, 128, 4, 4, 1), (128, 256, 64, 8, 3, 1),
           (64, 256, 64, 8, 4, 1)],
}
ENV = "PYTHONPATH=src:benchmarks"


def class_of(m: int):
    return next((rows for rows in WORDS_TILES if rows is not None and m <= rows), None)


def operands(m: int, n: int, k: int) -> tuple:
    """A, the weight's .T (B column-major) and the same values row-major, from seeds of the sizes."""
    a, weight = harness.int8_operands(m, n, k)
    return a, weight.T, weight.T.contiguous()


def int_mm_anchor(a, b_col):
    """torch._int_mm on the weight's .T as harness.int_mm_call makes it, or, should torch refuse
    A's rows as they are, A padded to a multiple of 8 rows (the padding counted)."""
    call = harness.int_mm_call(a, b_col)
    try:
        call()
        return call
    except RuntimeError:
        m, k = a.shape
        rows = a.new_zeros(-(-m // 8) * 8, k)

        def padded():
            rows[:m] = a
            return torch._int_mm(rows, b_col)[:m]
        return padded


def words_variants(m: int, n: int, k: int, candidates: list) -> list:
    """(label, tiles with their product, split_k) of the words variants of these candidates: each
    product, the runs the launch picks (`split auto (runs)`) and, where more than one, none."""
    found = []
    for tiles in candidates:
        runs = small_m.runs_of_k(m, n, k, availability.multiprocessors(), tiles)
        for product in WORDS:
            found.append((f"{product} {tiles[:5]} split auto ({runs})", tiles + (product,), None))
            if runs > 1:
                found.append((f"{product} {tiles[:5]} split 1", tiles + (product,), 1))
    return found


def launches(a, b_rows, rows: bool = True, candidates: list | None = None) -> dict:
    """label -> (a launch without arguments, the C it writes): the tables' row program (rows) and
    the words variants of the candidates (None: all of M's class)."""
    m, k = a.shape
    n = b_rows.shape[1]
    found = {}
    if rows:
        c = torch.full((m, n), -7, dtype=torch.int32, device="cuda")
        found["rows"] = (small_m.launcher(a, b_rows, c), c)
    for label, tiles, split in words_variants(m, n, k, WORDS_TILES[class_of(m)] if candidates is None else candidates):
        c = torch.full((m, n), -7, dtype=torch.int32, device="cuda")
        found[label] = (small_m.launcher(a, b_rows, c, split, tiles=tiles), c)
    return found


def warm(task: tuple) -> None:
    """Compile (run once) a worker's share, (M, the index of a candidate of M's class, or None: the
    tables' row program), on every shape."""
    m, index = task
    for n, k in SHAPES:
        a, _, b_rows = operands(m, n, k)
        candidates = [] if index is None else [WORDS_TILES[class_of(m)][index]]
        share = launches(a, b_rows, rows=index is None, candidates=candidates)
        for label, (launch, _) in share.items():
            try:
                launch()
            except Exception as e:       # reported again where it is checked
                print(f"warm {m} x {n} x {k} {label}: {type(e).__name__}", flush=True)
    torch.cuda.synchronize()


def problem(m: int, n: int, k: int, args, stamp: dict) -> dict:
    a, b_col, b_rows = operands(m, n, k)
    anchor = int_mm_anchor(a, b_col)
    reference = anchor()
    calls, wrong, failed = {"_int_mm": anchor}, [], {}
    for label, (launch, c) in launches(a, b_rows).items():
        try:
            launch()
            if torch.equal(c, reference):
                calls[label] = launch
            else:
                wrong.append(label)
        except Exception as e:  # noqa: BLE001 - a candidate past the shared memory, say: left out
            failed[label] = f"{type(e).__name__}: {e}"[:200]
    us = harness.medians(harness.rounds(calls, args.rounds,
                                        lambda call: harness.launch_us(call, args.block, args.graphs)))
    base, rows = us["_int_mm"], us.get("rows", float("nan"))
    words = {label: t for label, t in us.items() if label.startswith("int8-words")}
    best = min(words, key=words.get, default=None)
    record = {"m": m, "n": n, "k": k, "us": {label: round(t, 2) for label, t in us.items()},
              "vs_int_mm": {label: round(base / t, 3) for label, t in us.items() if label != "_int_mm"},
              "best_words": best, "best_words_vs_int_mm": round(base / words[best], 3) if best else None,
              "best_words_vs_rows": round(rows / words[best], 3) if best else None,
              "rows_tiles": list(small_m.tiles_for(m, True)), "wrong": wrong, "failed": failed, **stamp}
    print(f"{m:4} x {n:5} x {k:5}  _int_mm {base:6.1f}  rows {rows:6.1f} x{base / rows:.2f}"
          + (f"  best words {words[best]:6.1f} x{base / words[best]:.2f} (x{rows / words[best]:.2f} rows) {best}"
             if best else "  no words variant timed")
          + (f"  WRONG {wrong}" if wrong else "") + (f"  FAILED {sorted(failed)}" if failed else ""), flush=True)
    return record


def main():
    ap = harness.parser(__doc__.splitlines()[0], out_required=True, ms=list(MS), rounds=5, block=20, jobs=14,
                        prewarm=2.0, graphs=False)
    args = ap.parse_args()             # --out is a file here (JSON lines appended), not a folder
    if any(m < 1 for m in args.ms):
        raise SystemExit(f"--ms: positive row counts, not {args.ms!r}")
    if args.jobs > 1:           # Triton compiles one program at a time a process; its disk cache serves this one
        import concurrent.futures
        import multiprocessing
        shares = [(m, index) for m in args.ms for index in [None, *range(len(WORDS_TILES[class_of(m)]))]]
        try:
            with concurrent.futures.ProcessPoolExecutor(args.jobs,
                                                        mp_context=multiprocessing.get_context("spawn")) as pool:
                list(pool.map(warm, shares))
        except Exception as e:  # noqa: BLE001 - a worker lost: what it did not compile compiles when checked
            print(f"warm: {type(e).__name__}: {e}"[:300], flush=True)
    stamp = harness.stamp("int8_words_probe.py", args, env=ENV)
    harness.prewarm(args.prewarm, "float32")
    records = []
    for n, k in SHAPES:
        for m in args.ms:
            records.append(problem(m, n, k, args, stamp))
            harness.append(args.out, records[-1:])
    summary = {"summary": "int8_words_probe", "problems": len(records), **stamp}
    for name, key in (("rows", None), ("best words", "best_words_vs_int_mm")):
        ratios = [r["vs_int_mm"].get("rows") if key is None else r[key] for r in records]
        ratios = [x for x in ratios if x is not None]
        if ratios:
            summary[name] = {"min": min(ratios), "geomean": round(harness.geomean(ratios), 3),
                             "under_1": sum(x < 1.0 for x in ratios)}
            print(f"{name} x _int_mm: min {min(ratios):.3f} geomean {harness.geomean(ratios):.3f} "
                  f"under 1.0: {sum(x < 1.0 for x in ratios)} of {len(ratios)}", flush=True)
    wins = {}
    for r in records:
        if r["best_words"]:
            wins[r["best_words"]] = wins.get(r["best_words"], 0) + 1
    summary["best_words_counts"] = wins
    print("best words variants: " + json.dumps(dict(sorted(wins.items(), key=lambda kv: -kv[1]))), flush=True)
    harness.append(args.out, [summary])


if __name__ == "__main__":
    main()
