"""The default kernel's shape-class table (tilemm.choice) from the wide sweep's fit half, and what
it gives on the held-out half.

    PYTHONPATH=src python3 benchmarks/default_table.py FIT.jsonl [HELD_OUT.jsonl]

The records are tensorcore_vs_cublas.py --wide --whole-calls' (interleaved rounds, `tensorcore` and
`library` among the variants), one or both halves in a file. The table is made from the fit half
(tilemm.choice.winners: against the library rung); for each half the default's ratio to the library
rung is the rung's where the table names it and 1 elsewhere: its geometric mean, its lowest, and
which problems left the library. (A held-out record of the `default` variant itself, where there is
one, is its measured ratio: see tensorcore_vs_cublas.py's summary lines.)
"""
import json
import math
import sys

from tilemm import choice


def main(paths: list):
    records = [json.loads(line) for path in paths for line in open(path)]
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        rung = [r for r in records if r["dtype"] == dtype and r["variant"] == "tensorcore" and r.get("vs_library")]
        table = choice.winners([r for r in rung if r["tag"].endswith("/fit")])
        print(f"{dtype}: tensorcore where the shape class (work, aligned, depth, thin) is one of")
        for c in sorted(table):
            print(f"  {c}")
        shipped = choice.MEASURED_WINNERS.get(((9, 0), dtype), {})
        print("the shipped table (tilemm.choice.MEASURED_WINNERS) is", "the same" if shipped == table else "DIFFERENT")
        for split in ("fit", "held-out"):
            half = [r for r in rung if r["tag"].endswith("/" + split)]
            if not half:
                continue
            taken = [r for r in half if choice.record_class(r) in table]
            ratios = [r["vs_library"] for r in taken] + [1.0] * (len(half) - len(taken))    # the library's: 1
            print(f"{split}: {len(half)} problems, the default's geometric mean "
                  f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x the library rung, lowest "
                  f"{min(ratios):.3f}x; tensorcore on {len(taken)}: "
                  + ", ".join(f"{r['m']}x{r['n']}x{r['k']} {r['layout']} {r['vs_library']:.2f}x" for r in taken))


if __name__ == "__main__":
    main(sys.argv[1:])
