"""The default kernel's shape-class table (tilemm.choice) from the wide sweep's fit half, and what
it gives on the held-out half.

    PYTHONPATH=src python3 benchmarks/default_table.py FIT.jsonl [HELD_OUT.jsonl ...] [--checks GRID.jsonl ...]
    ... default_table.py FIT.jsonl ... --dtypes float64 --rung tensorcore-f64

The records are tensorcore_vs_cublas.py --wide --whole-calls' (interleaved rounds, the rung (`tensorcore` by
default) and `library` among the variants), one or both halves in a file; GRID files hold the same variants on
--shapes of a class the fit half has a single shape of. The table is made from the fit half
(tilemm.choice.winners: against the library rung; the --dtypes judged together, by default bfloat16
and float16, which run the same programs; a class of one fit shape judged with its grid too); for each half and dtype the
default's ratio to the library rung is the rung's where the table names it and 1 elsewhere: its
geometric mean, its lowest, and which problems left the library. (A held-out record of the
`default` variant itself, where there is one, is its measured ratio: see tensorcore_vs_cublas.py's
summary lines.)
"""
import argparse
import json
import math

from tilemm import choice

SIXTEEN_BIT = ("bfloat16", "float16")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records", nargs="+", help="tensorcore_vs_cublas.py --wide --whole-calls records")
    ap.add_argument("--checks", nargs="*", default=[], help="records of class grids (--shapes)")
    ap.add_argument("--dtypes", nargs="+", default=list(SIXTEEN_BIT), help="judged together")
    ap.add_argument("--rung", default="tensorcore")
    args = ap.parse_args()
    records = [json.loads(line) for path in args.records for line in open(path)]
    checks = [json.loads(line) for path in args.checks for line in open(path)]
    rung = [r for r in records if r["dtype"] in args.dtypes and r["variant"] == args.rung and r.get("vs_library")]
    table = choice.winners([r for r in rung if r["tag"].endswith("/fit")], rung=args.rung, min_shapes=2,
                           checks=checks)
    print(f"{' and '.join(args.dtypes)}: {args.rung} where the shape class (work, aligned, depth, thin) is one of")
    for c in sorted(table):
        print(f"  {c}")
    for dtype in args.dtypes:
        shipped = choice.MEASURED_WINNERS.get(((9, 0), dtype), {})
        print(f"{dtype}: the shipped table (tilemm.choice.MEASURED_WINNERS) is", "the same" if shipped == table else "DIFFERENT")
        for split in ("fit", "held-out"):
            half = [r for r in rung if r["dtype"] == dtype and r["tag"].endswith("/" + split)]
            if not half:
                continue
            taken = [r for r in half if choice.record_class(r) in table]
            ratios = [r["vs_library"] for r in taken] + [1.0] * (len(half) - len(taken))    # the library's: 1
            print(f"  {split}: {len(half)} problems, the default's geometric mean "
                  f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x the library rung, lowest "
                  f"{min(ratios):.3f}x; {args.rung} on {len(taken)}: "
                  + ", ".join(f"{r['m']}x{r['n']}x{r['k']} {r['layout']} {r['vs_library']:.2f}x" for r in taken))


if __name__ == "__main__":
    main()
