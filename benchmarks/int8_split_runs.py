"""How many runs the small-M int8 program splits K into (r11_int8_small_m.runs_of_k), against every
count it could take: the data its rule was fit on, and the held-out sets that check it.

    PYTHONPATH=src:benchmarks python3 benchmarks/int8_split_runs.py --out DIR [--sets fit held-out held-out-2]
        [--layouts col row] [--ms 1 8 16 17 32 ...] [--most 8]

Problems: M in --ms times (N, K) of int8_small_m.py's sets, B the weight (N, K) given as its .T
("col") or as a row-major (K, N) copy ("row"). For each, the program at the tiles its tables give
(tiles_for) is launched with every count of runs from 1 to --most (those that differ), the rule's
count and the count that fills the SMs (runs_to_fill, the rule before split_cost), kernel alone:
a launch of the program with no tilemm call around it. Every answer is checked exactly against
torch._int_mm's (B as (N, K).T; A padded to 32 rows where M <= 16) before anything is timed; a
wrong count is recorded and not timed. Timing: --rounds interleaved rounds, the order rotated,
each a block of --block launches back to back between CUDA events (with --graphs, a CUDA graph of
them: launches back to back are paced by the host where a kernel takes under 20 µs or so; the
record was timed without), after --prewarm seconds of products; the median a launch. `_int_mm`
is timed in the same rounds, for information.

One JSON line a problem (`us`: microseconds a launch by count of runs; `rule`, `fill`, `best`:
those counts; `rule_over_best`, `fill_over_best`: their times over the best count's, 1.0 at
best), and a summary line a set and layout (geometric means and the worst of those ratios).
"""
from __future__ import annotations

import torch

from tilemm.engine import availability
from tilemm.ladder.tensorcore import r11_int8_small_m as small_m

import harness
from int8_small_m import SETS

MS = [1, 8, 16, 17, 32, 48, 64, 100, 128, 200, 256]
ENV = "PYTHONPATH=src:benchmarks"


def counts_of_runs(k_steps: int, most: int) -> list:
    """The distinct counts of runs that 1..most wanted runs of k_steps give (no empty run)."""
    return sorted({-(-k_steps // -(-k_steps // wanted)) for wanted in range(1, most + 1)})


def problem(set_name: str, m: int, n: int, k: int, layout: str, args) -> dict:
    a, weight = harness.int8_operands(m, n, k)
    b = weight.T if layout == "col" else weight.T.contiguous()
    anchor = harness.int_mm_call(a, weight.T)
    reference = anchor()
    sms = availability.multiprocessors()
    tiles = small_m.tiles_for(m, layout == "row")
    tiles_of_c = -(-m // tiles[0]) * -(-n // tiles[1])
    k_steps = -(-k // tiles[2])
    rule = small_m.runs_of_k(m, n, k, sms, tiles)
    fill = small_m.runs_to_fill(tiles_of_c, k_steps, tiles[5] * sms)
    calls, wrong = {"_int_mm": anchor}, []
    for runs in sorted(set(counts_of_runs(k_steps, args.most)) | {rule, fill}):
        c = torch.full((m, n), -7, dtype=torch.int32, device="cuda")
        launch = small_m.launcher(a, b, c, split_k=runs)
        launch()
        if torch.equal(c, reference):
            calls[str(runs)] = launch
        else:
            wrong.append(runs)
    us = harness.medians(harness.rounds(calls, args.rounds,
                                        lambda call: harness.launch_us(call, args.block, args.graphs)))
    counts = {int(label): t for label, t in us.items() if label != "_int_mm"}
    best = min(counts, key=counts.get)
    return {"set": set_name, "m": m, "n": n, "k": k, "layout": layout, "tiles": list(tiles), "tiles_of_c": tiles_of_c,
            "k_steps": k_steps, "sms": sms, "rule": rule, "fill": fill, "best": best,
            "us": {label: round(t, 2) for label, t in us.items()},
            "rule_over_best": round(counts[rule] / counts[best], 3) if rule in counts else None,
            "fill_over_best": round(counts[fill] / counts[best], 3) if fill in counts else None, "wrong": wrong}


def summary(set_name: str, layout: str, records: list) -> dict:
    found = {"summary": f"{set_name} {layout}", "problems": len(records),
             "wrong": sum(len(r["wrong"]) for r in records)}
    for which in ("rule", "fill"):
        ratios = [r[f"{which}_over_best"] for r in records if r[f"{which}_over_best"] is not None]
        found[f"{which}_over_best_geomean"] = round(harness.geomean(ratios), 3)
        found[f"{which}_over_best_worst"] = max(ratios, default=None)
    return found


def main():
    args = harness.arguments(sets=list(SETS), layouts=["col", "row"], ms=list(MS), most=8, rounds=5, block=40,
                             prewarm=5.0, graphs=False)
    if set(args.sets) - set(SETS) or set(args.layouts) - {"col", "row"}:
        raise SystemExit(f"--sets: some of {list(SETS)}; --layouts: col and/or row")
    emit = harness.emitter(args.out / "int8_split_runs.jsonl", harness.stamp("int8_split_runs.py", args, ENV))
    harness.prewarm(args.prewarm, "float32")
    for set_name in args.sets:
        records = {layout: [] for layout in args.layouts}
        for n, k in SETS[set_name]:
            for m in args.ms:
                for layout in args.layouts:
                    records[layout].append(problem(set_name, m, n, k, layout, args))
                    emit(records[layout][-1])
        for layout in args.layouts:
            emit(summary(set_name, layout, records[layout]))


if __name__ == "__main__":
    main()
