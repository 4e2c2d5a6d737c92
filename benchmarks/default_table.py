"""The default kernel's shape-class table (tilemm.choice) from a wide sweep, and what it gives on
the half it was not made from.

    PYTHONPATH=src python3 benchmarks/default_table.py benchmarks/results/h100-2026-11-24-s9/wide_bf16.jsonl

The records are tensorcore_vs_cublas.py --wide's (kernel alone, interleaved rounds). The table is
made from the fit half (tilemm.choice.winners); for each half the default's ratio to cuBLAS is the
rung's where the table names it and 1 elsewhere: its geometric mean, its lowest, and which problems
left cuBLAS.
"""
import json
import math
import sys

from tilemm import choice


def main(path: str):
    records = [json.loads(line) for line in open(path)]
    rung = [r for r in records if r["variant"] == "tensorcore" and r.get("vs_cublas")]
    table = choice.winners([r for r in rung if r["tag"].endswith("/fit")])
    dtype = rung[0]["dtype"]
    print(f"{dtype}: tensorcore where the shape class is one of")
    for c in sorted(table):
        print(f"  work={c[0]} aligned={c[1]} depth={c[2]} skinny={c[3]}")
    shipped = choice.MEASURED_WINNERS.get(((9, 0), dtype), {})
    print("the shipped table (tilemm.choice.MEASURED_WINNERS) is", "the same" if shipped == table else "DIFFERENT")
    for split in ("fit", "held-out"):
        half = [r for r in rung if r["tag"].endswith("/" + split)]
        ratios = [r["vs_cublas"] if choice.record_class(r) in table else 1.0 for r in half]
        rungs = [r for r in half if choice.record_class(r) in table]
        print(f"{split}: {len(half)} problems, the default's geometric mean "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x cuBLAS, lowest {min(ratios):.3f}x; "
              f"tensorcore on {len(rungs)}: " + ", ".join(f"{r['m']}x{r['n']}x{r['k']} {r['vs_cublas']:.2f}x"
                                                         for r in rungs))


if __name__ == "__main__":
    main(sys.argv[1])
