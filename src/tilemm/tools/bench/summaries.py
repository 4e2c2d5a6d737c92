"""What the report's tables and figures both read: the rungs' order, their series of
measurements, the ladder at one size."""
from __future__ import annotations

from collections import defaultdict

from tilemm.ladder import registry

ANCHORS = ("numpy", "cublas")       # the libraries each device's rungs are measured against
NAIVE = ("naive", "cpu-naive")      # the rung the speed-ups count from, in order of preference


def sig(x: float) -> str:
    """A rate with three significant digits, whole numbers from 100 on: 0.0219, 5.59, 126, 51,409."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def times(x: float) -> str:
    """A speed ratio with the digits it needs: 22x, 2.27x, 0.0312x, never 0.00x."""
    if x >= 100:
        return f"{x:.0f}x"
    if x >= 1e-4:
        return f"{x:.3g}x"
    return "<0.0001x"


def rung_of(kernel: str) -> int:
    try:
        return registry.get(kernel).rung
    except ValueError:          # a rung not in the registry: after the others
        return 10**6


def label_of(r: dict) -> str:
    return r["kernel"] + "".join(f" {k}={v}" for k, v in r["params"].items())


def series_of(records):
    """(kernel label, dtype) -> sorted [(n, record)] for square, device-resident cases; a case
    measured by two suites of the run (the seeds' and the ladder's) appears once."""
    out = defaultdict(dict)
    for r in records:
        if r["status"] in ("ok", "estimated") and r["m"] == r["n"] == r["k"] and not r.get("host_inputs"):
            points = out[(label_of(r), r["dtype"])]
            if r["n"] not in points or points[r["n"]]["status"] != "ok":
                points[r["n"]] = r
    return {key: sorted(v.items(), key=lambda x: x[0]) for key, v in out.items()}


def ladder_summary(records: list[dict]) -> dict | None:
    """The ladder at one size: the dtype (float32 where measured) and the size n at which the
    most rungs were measured (then the most have a time, then the largest such n), each rung's
    GFLOP/s, its speed-up over the rung before it and over the naive rung, and its speed relative
    to the library. None if no rung has a square time."""
    series = series_of(records)
    if not series:
        return None
    dtypes = [d for _, d in series]
    dtype = "float32" if "float32" in dtypes else max(set(dtypes), key=dtypes.count)
    at = defaultdict(dict)                # n -> label -> record
    for (label, dt), points in series.items():
        if dt == dtype:
            for n, r in points:
                at[n][label] = r
    # the size with the most rungs measured (not estimated), then the most rungs, then the largest
    n = max(at, key=lambda size: (sum(r["status"] == "ok" for r in at[size].values()), len(at[size]), size))
    chosen = at[n]
    order = sorted(chosen, key=lambda label: (chosen[label]["kernel"] in ANCHORS, rung_of(chosen[label]["kernel"]),
                                              label))
    naive = next((label for name in NAIVE for label in order if label == name), None)
    rows, before = [], None
    for label in order:
        r = chosen[label]
        anchor = r["kernel"] in ANCHORS
        rows.append({"label": label, "record": r, "estimated": r["status"] == "estimated", "gflops": r["gflops"],
                     "over_before": None if anchor or before is None else r["gflops"] / before["gflops"],
                     "over_naive": r["gflops"] / chosen[naive]["gflops"] if naive else None,
                     "vs_library": r.get("ratio") if not anchor else None, "anchor": anchor})
        if not anchor:
            before = r
    return {"dtype": dtype, "n": n, "naive": naive, "rows": rows}


def wide_records(records: list[dict]) -> list[dict]:
    """The wide suite's timed records of rungs other than their baseline, with a ratio to it."""
    return [r for r in records if r.get("suite") == "wide" and r["status"] == "ok" and r.get("ratio")
            and r["kernel"] != r.get("baseline")]
