"""int8 -> exact int32 at a few rows (M 1-256) times real layers' weights, B in either layout,
against torch._int_mm given B as (N, K).T (its fast layout): the bar is 1.0x or better on every
problem of the held-out set. And --tune: the small-M program's tiles for each layout.

    PYTHONPATH=src python3 benchmarks/int8_small_m.py --out DIR [--set fit|held-out|held-out-2|all]
        [--layouts col row]
    PYTHONPATH=src python3 benchmarks/int8_small_m.py --out DIR --tune [--layouts row] [--then-sweep --set held-out]
        [--products int8 fp16 fp16-swap]

Problems: M in --ms times (N, K) of a set: `fit`, the layers the tiles and the default's rule
were set on (--tune times only these), and `held-out`, other layers', never looked at while
setting them; `held-out-2`, layers of other models still, added after the split's rule
(r11_int8_small_m.split_cost) was fit on the first two (`all`: fit and held-out). A is (M, K) row-major; B is the weight as torch.nn.Linear keeps it, (N, K), given as
its .T ("col"), or the same values as a row-major (K, N) array ("row"). Variants, each a whole
call as a user makes it:

- _int_mm: torch._int_mm(a, b) with B as (N, K).T, the anchor whatever the layout; for M <= 16,
  which it refuses, A padded to 32 rows first (a.new_zeros(32, K), a copy in, the product's first
  M rows): the padding counted;
- _int_mm-row: the same given B row-major, for information (cuBLAS reads it slowly);
- col, row: tilemm.matmul(a, b, out_dtype="int32") given B in that layout (the default, its plan
  cached after the first call); with --rung also col-rung, row-rung: the same naming
  kernel="tensorcore-int" (where the default takes the library, the rung's own call).

Every answer, the anchor's too (so each equals the anchor's), is checked exactly against a float64
product on the GPU (exact: |sums| <= K * 2^14 < 2^53) before anything is timed; a wrong one is
recorded and not timed, and so is a call that raises (`failed`: cuBLASLt has refused sizes with B
row-major). Timing, the bar's measure: CUDA events around
each call, the GPU idle before it (a call's CPU cost counts, as a user waiting on one call pays
it), in interleaved rounds (the order rotated each round), the median of all of a variant's calls.
Besides, each round times a block of --block calls back to back by wall clock (`*_wall_*`). One
JSON line a problem (ratios: the anchor's time over the variant's, above 1 is faster), then a
summary line a set and layout: the lowest ratio, the geometric mean, the problems under the bar.

--tune: for each layout and each class of M (the rows of the module's tables), every candidate of
TILE_CANDIDATES on the tensor cores of --products (a candidate's seventh item: "int8" where none;
the 16-bit ones, "fp16" and "fp16-swap", are exact in float32 chunks; "int8-words" and
"int8-words-ahead", a row-major B turned over a word at a time, tried for --layouts row only: the
module's PRODUCTS), and the table in force's row besides (so the tuned table loses to none of it), run alone (the
program's launcher, no tilemm call around it) on the fit set's problems of that class, in
interleaved rounds, a CUDA graph of --tune-block launches (the GPU's pace: launched back to back
from Python, kernels of a few microseconds are paced by the host, and tiles a third apart on the
GPU time alike); a candidate's score is the geometric mean over the problems of the best candidate's time
over its own. Prints the winning table in the module's form (TILES, ROW_TILES).

--tune --then-sweep: then the sweep of --set with the tables just tuned (set on the module for
this process; each record's `tiles` gives the tables it ran).

Both modes first run every program they will time once in --jobs processes, which compile them
into Triton's disk cache at once (one process compiles one program at a time).
"""
from __future__ import annotations

import json

import torch

import tilemm
from tilemm.ladder.tensorcore import r11_int8_small_m as small_m

import harness

# (N, K) of layers: Llama-3 8B / 70B, Mistral, Qwen, Gemma
FIT = [(3072, 8192), (14336, 4096), (2048, 2048), (28672, 8192), (3584, 18944), (8192, 6144)]
HELD_OUT = [(5376, 3584), (4096, 4096), (4096, 14336), (11008, 4096), (5120, 5120), (1024, 4096)]
# Phi-3, Falcon, Gemma-2, DeepSeek-V2-Lite, Qwen2.5-3B
HELD_OUT_2 = [(9216, 3072), (4544, 4544), (18176, 4544), (14336, 3584), (10944, 2048), (2048, 11008)]
SETS = {"fit": FIT, "held-out": HELD_OUT, "held-out-2": HELD_OUT_2}
MS = [1, 8, 16, 32, 64, 100, 128, 200, 256]
BAR = 1.0
PADDED_ROWS = harness.INT_MM_PADDED_ROWS
WORDS_PRODUCTS = ("int8-words", "int8-words-ahead")   # a row-major B turned over a word at a time
# candidates a class of M: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, programs an SM[, product]),
# the product (the module's PRODUCTS) "int8" where not named; the 16-bit ones' BLOCK_K divides
# CHUNK_K, and their two accumulators (float32, int32) keep a tile to 64 elements a thread or so;
# those of two programs an SM fit two to an SM (registers, shared memory), one converting its
# tiles while the other multiplies
TILE_CANDIDATES = {
    16: [(16, 128, 256, 4, 3, 1), (16, 128, 128, 4, 4, 1), (16, 64, 256, 4, 3, 1), (16, 128, 64, 4, 6, 1),
         (16, 256, 128, 4, 3, 1), (16, 64, 128, 4, 4, 2), (16, 128, 128, 4, 4, 2), (16, 256, 64, 8, 4, 1),
         (16, 64, 128, 4, 4, 1, "fp16-swap"), (16, 128, 128, 4, 4, 1, "fp16-swap"), (16, 128, 64, 4, 6, 1, "fp16-swap"),
         (16, 128, 64, 4, 6, 1, "int8-words"), (16, 128, 128, 4, 4, 1, "int8-words")],
    32: [(32, 64, 128, 4, 4, 2), (32, 128, 128, 4, 4, 1), (32, 64, 256, 4, 3, 1), (32, 128, 64, 4, 5, 1),
         (32, 64, 64, 4, 6, 2), (16, 128, 128, 4, 4, 1),
         (32, 64, 128, 4, 4, 1, "fp16-swap"), (32, 128, 128, 4, 4, 1, "fp16-swap"), (32, 128, 64, 4, 5, 1, "fp16-swap"),
         (32, 128, 64, 4, 5, 1, "fp16"), (32, 128, 64, 4, 5, 1, "int8-words"), (32, 128, 128, 4, 4, 1, "int8-words")],
    64: [(64, 64, 128, 4, 4, 1), (64, 128, 128, 4, 4, 1), (64, 128, 64, 4, 5, 1), (64, 64, 256, 4, 3, 1),
         (64, 64, 64, 4, 6, 2), (32, 128, 128, 4, 4, 1), (64, 64, 128, 4, 4, 2), (64, 128, 128, 4, 4, 2),
         (32, 64, 128, 4, 4, 2),
         (64, 64, 128, 4, 4, 1, "fp16-swap"), (64, 128, 128, 8, 4, 1, "fp16-swap"), (64, 128, 64, 4, 4, 1, "fp16-swap"),
         (64, 128, 64, 8, 5, 1, "fp16-swap"), (64, 128, 64, 8, 5, 2, "fp16-swap"), (64, 128, 128, 8, 4, 1, "fp16"),
         (64, 128, 128, 4, 4, 1, "int8-words"), (64, 128, 128, 4, 4, 1, "int8-words-ahead"),
         (32, 128, 128, 4, 4, 1, "int8-words")],
    None: [(64, 128, 128, 4, 4, 1), (64, 128, 64, 4, 5, 1), (128, 128, 128, 8, 4, 1), (128, 64, 128, 4, 4, 1),
           (64, 256, 64, 4, 4, 1), (128, 128, 64, 8, 5, 1), (64, 64, 128, 4, 4, 2), (64, 128, 128, 4, 4, 2),
           (64, 128, 128, 8, 4, 1), (64, 128, 128, 8, 4, 2), (32, 128, 128, 4, 4, 1), (128, 128, 64, 8, 5, 2),
           (128, 128, 64, 8, 4, 1, "fp16-swap"), (128, 128, 128, 8, 3, 1, "fp16-swap"), (256, 64, 64, 8, 4, 1, "fp16-swap"),
           (128, 64, 128, 8, 4, 1, "fp16-swap"), (128, 64, 64, 4, 4, 1, "fp16-swap"), (128, 64, 64, 4, 4, 2, "fp16-swap"),
           (128, 128, 64, 8, 4, 1, "fp16"), (128, 128, 128, 8, 4, 1, "int8-words"),
           (128, 128, 128, 8, 4, 1, "int8-words-ahead"), (128, 64, 128, 4, 4, 1, "int8-words-ahead"),
           (64, 128, 128, 4, 4, 1, "int8-words-ahead")],
}


def weights(n: int, k: int, layouts: list) -> dict:
    """{layout: B} of one (N, K) weight's values: "col" its .T, "row" a row-major (K, N) copy."""
    gen = torch.Generator(device="cuda").manual_seed(n * 131 + k)
    weight = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=gen)
    found = {"col": weight.T}
    if "row" in layouts:
        found["row"] = weight.T.contiguous()
    return found


def activations(m: int, n: int, k: int):
    gen = torch.Generator(device="cuda").manual_seed(m * 7919 + n * 31 + k)
    return torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=gen)


def variants(a, bs: dict, layouts: list, rung: bool = False) -> dict:
    """label -> a whole call giving A @ B in int32 (rung: also `<layout>-rung`, tensorcore-int named)."""
    calls = {"_int_mm": harness.int_mm_call(a, bs["col"])}
    if "row" in layouts:
        calls["_int_mm-row"] = harness.int_mm_call(a, bs["row"])
    for layout in layouts:
        calls[layout] = (lambda b: lambda: tilemm.matmul(a, b, out_dtype="int32"))(bs[layout])
        if rung:
            calls[f"{layout}-rung"] = (lambda b: lambda: tilemm.matmul(a, b, out_dtype="int32",
                                                                      kernel="tensorcore-int"))(bs[layout])
    return calls


def exact(c, reference) -> bool:
    return c.dtype == torch.int32 and c.shape == reference.shape and torch.equal(c.double(), reference)


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


def program(a, b) -> str:
    """What the default runs: its kernel, and for tensorcore-int whether its small-M program (and on
    which tensor cores: its tiles' product, and the tiles' BLOCK_M x BLOCK_N)."""
    kernel = tilemm.plan(a, b, out_dtype="int32").kernel.name
    c = torch.empty(a.shape[0], b.shape[1], dtype=torch.int32, device=a.device)
    if kernel != "tensorcore-int" or not small_m.takes(a, b, c):
        return kernel
    tiles = small_m.tiles_for(a.shape[0], small_m.b_rows(b), b.shape[1])
    return f"{kernel} small-m {small_m.product_of(tiles)} {tiles[0]}x{tiles[1]}"


def problem(set_name, m, n, k, bs, b64, args, stamp) -> dict:
    a = activations(m, n, k)
    reference = a.double() @ b64
    calls, wrong, failed = variants(a, bs, args.layouts, args.rung), [], {}
    for label, call in calls.items():          # every answer checked (and compiled) before any timing
        try:
            if not exact(call(), reference):
                wrong.append(label)
        except RuntimeError as e:               # cuBLASLt has refused some sizes with B row-major
            failed[label] = str(e)[:200]
    times, blocks = measure({label: call for label, call in calls.items() if label not in wrong and label not in failed},
                            args.rounds, args.per_round, args.block)
    us, wall = harness.medians(times), harness.medians(blocks)
    base, wall_base = us.get("_int_mm"), wall.get("_int_mm")
    record = {"set": set_name, "m": m, "n": n, "k": k, "layouts": args.layouts,
              **{f"{layout}_program": program(a, bs[layout]) for layout in args.layouts},
              "int_mm_form": "as it is" if m > 16 else f"A padded to {PADDED_ROWS} rows (new_zeros, copy, slice: counted)",
              **{f"{label}_us": round(t, 2) for label, t in us.items()},
              **{f"{label}_vs_int_mm": round(base / t, 4) for label, t in us.items() if base and label != "_int_mm"},
              **{f"{label}_wall_us": round(t, 2) for label, t in wall.items()},
              **{f"{label}_wall_vs_int_mm": round(wall_base / t, 4) for label, t in wall.items()
                 if wall_base and label != "_int_mm"},
              "samples": min(len(ts) for ts in times.values()), "blocks": args.rounds, "block_calls": args.block,
              "wrong": wrong, "failed": failed, **stamp}
    print(f"{set_name:8} {m:4} x {n:5} x {k:5}" + "".join(f"  {label} {t:6.1f}" for label, t in us.items())
          + "".join(f"  {layout} x{record.get(f'{layout}_vs_int_mm', float('nan')):.3f}" for layout in args.layouts)
          + (f"  WRONG {wrong}" if wrong else "") + (f"  FAILED {sorted(failed)}" if failed else ""), flush=True)
    return record


def summary(set_name: str, layout: str, records: list[dict], stamp: dict) -> dict:
    """A set's figures for one layout: CUDA events (the bar's measure) and, besides, blocks of calls."""
    line = {"summary": set_name, "layout": layout, "problems": len(records), "bar": BAR,
            "wrong": sum(layout in r["wrong"] or "_int_mm" in r["wrong"] for r in records),
            "failed": sum(layout in r["failed"] or "_int_mm" in r["failed"] for r in records)}
    for measure_name, key in (("events", f"{layout}_vs_int_mm"), ("blocks", f"{layout}_wall_vs_int_mm")):
        ratios = [r[key] for r in records if key in r]
        line[measure_name] = {
            "timed": len(ratios), "min": min(ratios, default=None),
            "geomean": harness.geomean(ratios) if ratios else None, "under_bar": sum(x < BAR for x in ratios),
            "problems_under_bar": [(r["m"], r["n"], r["k"], r[key]) for r in records if r.get(key, BAR) < BAR]}
    print(json.dumps({k: v for k, v in line.items() if k not in ("events", "blocks")}
                     | {name: {k: v for k, v in line[name].items() if k != "problems_under_bar"}
                        for name in ("events", "blocks")}), flush=True)
    return {**line, **stamp}


def tables() -> dict:
    """{layout: the small-M program's tiles table in force} (the module's, or --then-sweep's)."""
    return {"col": small_m.TILES, "row": small_m.ROW_TILES}


def sweep(args, stamp) -> None:
    path = args.out / "int8_small_m.jsonl"
    names = ["fit", "held-out"] if args.set == "all" else [args.set]
    stamp = {**stamp, "tiles": {layout: tables()[layout] for layout in args.layouts},
             "few_tiles": {"col": small_m.FEW_TILES, "row": small_m.FEW_ROW_TILES}}
    warm_in_parallel([(layout, tiles, [shape for name in names for shape in SETS[name]],
                       [m for m in args.ms if class_of(m) == rows]) for layout in args.layouts
                      for rows, tiles in tables()[layout]], args.jobs)
    for set_name in names:
        records = []
        for n, k in SETS[set_name]:
            bs = weights(n, k, args.layouts)
            b64 = bs["col"].double()
            for m in args.ms:
                records.append(problem(set_name, m, n, k, bs, b64, args, stamp))
                harness.append(path, records[-1:])
            del bs, b64
            tilemm.release_memory()
            torch.cuda.empty_cache()
        harness.append(path, [summary(set_name, layout, records, stamp) for layout in args.layouts])


def class_of(m: int) -> int | None:
    """The row of the module's tables (and of TILE_CANDIDATES) that M rows take."""
    return next((rows for rows in TILE_CANDIDATES if rows is not None and m <= rows), None)


def warm(tasks: list) -> None:
    """Run each task's programs once, (layout, tiles, [(n, k)], ms): the small-M program's launcher
    at these tiles, or (tiles None) the default's call, which compiles them into Triton's cache."""
    for layout, tiles, shapes, ms in tasks:
        for n, k in shapes:
            b = weights(n, k, [layout])[layout]
            for m in ms:
                a = activations(m, n, k)
                try:
                    if tiles is None:
                        tilemm.matmul(a, b, out_dtype="int32")
                    else:
                        small_m.launcher(a, b, torch.empty(m, n, dtype=torch.int32, device="cuda"), tiles=tiles)()
                except Exception as e:            # reported again where it is timed
                    print(f"warm: {layout} {tiles} {m} x {n} x {k}: {type(e).__name__}", flush=True)
            torch.cuda.synchronize()


def warm_in_parallel(tasks: list, jobs: int) -> None:
    """warm(tasks) shared among `jobs` processes (Triton compiles one program at a time a process;
    its disk cache serves this one after): a few seconds where one process would take minutes."""
    if jobs <= 1:
        return warm(tasks)
    import concurrent.futures
    import multiprocessing
    try:
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(warm, [tasks[i::jobs] for i in range(jobs)]))
    except Exception as e:      # a worker lost: whatever it did not compile compiles at its first timed call
        print(f"warm: {type(e).__name__}: {e}"[:300], flush=True)


def candidates_of(layout: str, rows, products: list) -> list:
    """TILE_CANDIDATES of a class of M on the tensor cores of `products` (the words products for a
    row-major B only: with B as (N, K).T they run as int8), and the table in force's row for the
    class and layout (once)."""
    found = [tiles for tiles in TILE_CANDIDATES[rows] if small_m.product_of(tiles) in products
             and (layout == "row" or small_m.product_of(tiles) not in WORDS_PRODUCTS)]
    in_force = dict(tables()[layout])[rows]
    return found + [in_force] * (in_force not in found)


def tune(args, stamp) -> dict:
    """Time the candidates (candidates_of) for each layout and class of M on the fit set; print the
    tables and return them, {layout: table}."""
    path = args.out / "int8_small_m_tune.jsonl"
    warm_in_parallel([(layout, tiles, FIT, [m for m in args.ms if class_of(m) == rows]) for layout in args.layouts
                      for rows in TILE_CANDIDATES for tiles in candidates_of(layout, rows, args.products)], args.jobs)
    tuned = {}
    for layout in args.layouts:
        table = []
        for rows in TILE_CANDIDATES:
            candidates = candidates_of(layout, rows, args.products)
            ms = [m for m in args.ms if class_of(m) == rows]
            if not ms:                      # no --ms in this class: the table in force keeps its row
                table.append((rows, dict(tables()[layout])[rows]))
                continue
            scores = {tiles: [] for tiles in candidates}
            for n, k in FIT:
                b = weights(n, k, [layout])[layout]
                b64 = b.double()
                for m in ms:
                    a = activations(m, n, k)
                    reference = a.double() @ b64
                    launches = {}
                    for tiles in candidates:
                        c = torch.full((m, n), -7, dtype=torch.int32, device="cuda")
                        try:
                            launch = small_m.launcher(a, b, c, tiles=tiles)
                            launch()
                        except Exception as e:          # a candidate past the shared memory, say: left out
                            print(f"FAILED {layout} {m} x {n} x {k} {tiles}: {e!r}"[:300], flush=True)
                            continue
                        if exact(c, reference):
                            launches[tiles] = launch
                        else:
                            print(f"WRONG {layout} {m} x {n} x {k} {tiles}", flush=True)
                    times = harness.medians(harness.rounds(launches, args.rounds,
                                                           lambda launch: harness.graph_us(launch, args.tune_block)))
                    best = min(times.values())
                    for tiles, t in times.items():
                        scores[tiles].append(best / t)
                    harness.append(path, [{"tune": layout, "m": m, "n": n, "k": k, "class": rows,
                                           "us": {str(t): round(v, 2) for t, v in times.items()}, **stamp}])
                    print(f"{layout} {m:4} x {n:5} x {k:5}  best {min(times, key=times.get)} {best:6.1f} µs", flush=True)
                del b, b64
                torch.cuda.empty_cache()
            ranked = sorted(((harness.geomean(s), min(s), tiles) for tiles, s in scores.items()
                             if len(s) == len(ms) * len(FIT)), reverse=True)
            for score, worst, tiles in ranked:
                print(f"  class {rows}: {tiles}  geomean of best/own {score:.3f}, worst {worst:.3f}")
            table.append((rows, ranked[0][2]))
            harness.append(path, [{"tune_class": layout, "class": rows, "ranked": [(s, w, list(t)) for s, w, t in ranked],
                                   **stamp}])
        name = "ROW_TILES" if layout == "row" else "TILES"
        print(f"{name} = (" + (",\n" + " " * (len(name) + 4)).join(f"({rows}, {tiles})" for rows, tiles in table) + ")",
              flush=True)
        tuned[layout] = tuple(table)
    return tuned


def main():
    args = harness.arguments(set="all", layouts=["col", "row"], ms=list(MS), rounds=5, per_round=8, block=20,
                             prewarm=5.0, tune=False, tune_block=20, jobs=8, then_sweep=False, rung=False,
                             products=list(small_m.PRODUCTS))
    if args.set not in (*SETS, "all"):
        raise SystemExit(f"--set: {', '.join(SETS)} or all, not {args.set!r}")
    if not args.layouts or set(args.layouts) - {"col", "row"}:
        raise SystemExit(f"--layouts: col and/or row, not {args.layouts!r}")
    if not args.products or set(args.products) - set(small_m.PRODUCTS):
        raise SystemExit(f"--products: some of {small_m.PRODUCTS}, not {args.products!r}")
    stamp = harness.stamp("int8_small_m.py", args)
    harness.prewarm(args.prewarm, "float32")
    if not args.tune:
        return sweep(args, stamp)
    tuned = tune(args, stamp)
    if args.then_sweep:          # --set's problems with the tables just tuned, in this process
        small_m.TILES = tuned.get("col", small_m.TILES)
        small_m.ROW_TILES = tuned.get("row", small_m.ROW_TILES)
        sweep(args, {**stamp, "tiles_tuned_in_this_run": sorted(tuned)})


if __name__ == "__main__":
    main()
