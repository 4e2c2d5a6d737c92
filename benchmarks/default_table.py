"""The default kernel's shape-class tables (tilemm.choose.by_shape) from their canonical records: writes the
package data files src/tilemm/choose/tables/*.json, checks them, and says what each table gives on the
wide sweep's held-out half.

    python3 benchmarks/default_table.py            # write every table from its record
    python3 benchmarks/default_table.py --check    # exit 1 if a committed table differs from its record
    PYTHONPATH=src python3 benchmarks/default_table.py --held-out   # each table on the held-out half

A table is made from the fit half of the wide sweep (tensorcore_vs_cublas.py --wide fit --whole-calls,
the rung and `library` among the variants) by tilemm.choose.by_shape.winners: the shape classes where the rung's
ratios to the library rung have a geometric mean of at least 1.05x and none below 0.97x. The dtypes of
a table are judged together (bfloat16 and float16 run the same programs); a class the fit half holds a
single shape of is judged with a grid of its own as well (min_shapes=2 and the `checks` records). Each
data file carries its provenance: the GPU and the date of its records, the records' paths and commands,
and this script's command.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]
from tilemm.choose import by_shape as choice  # noqa: E402  (the library, from this checkout)

from harness import geomean  # noqa: E402
from harness.records import read_records  # noqa: E402

RESULTS = "benchmarks/results"
HELD_OUT = f"{RESULTS}/h200/tensorcore_vs_library.jsonl.gz"

# data file -> what it is made from: the records (fit half), the class grids, the dtypes judged
# together, the rung, the GPU generation it applies to, and winners' min_shapes
TABLES = {
    "sm90_16bit.json": dict(record=f"{RESULTS}/h200/default_fit.jsonl.gz", checks=f"{RESULTS}/h200/default_grid.jsonl.gz",
                            dtypes=["bfloat16", "float16"], rung="tensorcore", capability=[9, 0], min_shapes=2),
    "sm90_float64.json": dict(record=f"{RESULTS}/h200/default_fit.jsonl.gz", checks=f"{RESULTS}/h200/default_grid.jsonl.gz",
                              dtypes=["float64"], rung="tensorcore-f64", capability=[9, 0], min_shapes=2),
    "sm90_int8.json": dict(record=f"{RESULTS}/h100/default_fit.jsonl.gz", checks=None,
                           dtypes=["int8"], rung="tensorcore-int", capability=[9, 0], min_shapes=1),
}
COMMAND = "python3 benchmarks/default_table.py"


def fit_half(records: list[dict], dtypes, rung: str) -> list[dict]:
    return [r for r in records if r["dtype"] in dtypes and r["variant"] == rung and r.get("tag", "").endswith("/fit")]


def make_table(name: str, root: Path = ROOT) -> dict:
    """The data file `name` as its records make it (what TABLES says)."""
    spec = TABLES[name]
    records = [r for r in read_records(root / spec["record"]) if r["dtype"] in spec["dtypes"]]
    checks = [r for r in read_records(root / spec["checks"]) if r["dtype"] in spec["dtypes"]] if spec["checks"] else []
    fit = fit_half(records, spec["dtypes"], spec["rung"])
    won = choice.winners(fit, rung=spec["rung"], min_shapes=spec["min_shapes"], checks=checks)
    used = fit + [r for r in checks if r["variant"] == spec["rung"]]
    return {
        "about": f"where the default takes {spec['rung']} instead of the library rung, by shape class "
                 "(work, aligned, depth, thin: tilemm.choose.by_shape.shape_class); written by " + COMMAND,
        "capability": spec["capability"],
        "dtypes": spec["dtypes"],
        "rung": spec["rung"],
        "rule": {"against": "vs_library", "min_geomean": 1.05, "min_ratio": 0.97, "min_shapes": spec["min_shapes"]},
        "device": sorted({r["device"] for r in used}),
        "date": max(r["date"] for r in used)[:10],
        "record": spec["record"],
        "checks": spec["checks"],
        "commands": sorted({r["command"] for r in used}),
        "winners": sorted([list(c) for c in won]),
        "measured": sorted([list(c) for c in choice.measured(fit, spec["rung"])]),
    }


def table_text(table: dict) -> str:
    """A table as its file holds it: a key a line, a shape class a line, so that a diff reads."""
    def value(v):
        if isinstance(v, list) and v and isinstance(v[0], list):
            return "[\n" + ",\n".join("  " + json.dumps(c) for c in v) + "\n ]"
        return json.dumps(v)
    return "{\n" + ",\n".join(f" {json.dumps(k)}: {value(v)}" for k, v in table.items()) + "\n}\n"


def held_out(name: str) -> None:
    """What the table gives on the held-out half: the rung's ratio where it names the class, the
    library's (1) elsewhere."""
    table = json.loads((ROOT / "src/tilemm/choose/tables" / name).read_text())
    classes = {tuple(c) for c in table["winners"]}
    records = read_records(ROOT / HELD_OUT)
    for dtype in table["dtypes"]:
        half = [r for r in records if r["dtype"] == dtype and r["variant"] == table["rung"] and r.get("vs_library")]
        if not half:
            continue
        taken = [r for r in half if choice.record_class(r) in classes]
        ratios = [r["vs_library"] for r in taken] + [1.0] * (len(half) - len(taken))
        print(f"{dtype}: {len(half)} held-out problems, the table's geometric mean "
              f"{geomean(ratios):.3f}x the library rung, lowest {min(ratios):.3f}x; "
              f"{table['rung']} on {len(taken)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare the committed tables with their records")
    ap.add_argument("--held-out", action="store_true", help="what each table gives on the held-out half")
    args = ap.parse_args()
    stale = []
    for name in TABLES:
        path = ROOT / "src/tilemm/choose/tables" / name
        if args.held_out:
            held_out(name)
            continue
        text = table_text(make_table(name))
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            print("wrote", path.relative_to(ROOT))
    if stale:
        sys.exit(f"out of step with their records: {', '.join(stale)} (run {COMMAND})")


if __name__ == "__main__":
    main()
