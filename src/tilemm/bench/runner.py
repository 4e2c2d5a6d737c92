"""Run a suite: check every kernel's answer, then time it; one JSON record per measurement.

A kernel whose answer fails the check is recorded as FAILED and never timed. Each rung runs
its sizes smallest first; a case whose predicted time a call (from the same rung's largest
measured size, scaled by the flop count) exceeds skip_over_s is not run: it is recorded as
"estimated", its time the prediction, and the table and plots mark it so.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import _compat, api, arrays, machine, registry, tuning
from ..accuracy import compare_on_device
from ..data import operands
from ..machine import gpu
from .seeds import published
from .suites import Case
from ..timing import summary, time_cuda, time_host

L2_ROTATE_BYTES = 64 * 2**20  # rotate input sets until they span more than any L2 cache


def run_suite(cases: list[Case], *, suite: str, budget_s: float = 2.0, skip_over_s: float = 60.0,
              results: Path | None = None, progress: bool = True) -> list[dict]:
    stamp = {**machine.stamp(" ".join(["tilemm"] + sys.argv[1:])), "suite": suite}
    records, seen = [], {}
    first = {}
    for i, c in enumerate(cases):       # each rung's sizes smallest first: the small ones predict the rest
        first.setdefault(c.key, i)
    cases = sorted(cases, key=lambda c: (first[c.key], c.m * c.n * c.k))
    for case, rec in _each(cases, progress):
        rec.update(_measure(case, budget_s, skip_over_s, seen))
        rec.update(stamp)
        records.append(rec)
        if results is not None:  # as it comes: a run cut short keeps what it measured
            results.parent.mkdir(parents=True, exist_ok=True)
            with open(results, "a") as f:
                f.write(json.dumps(rec) + "\n")
    return with_ratios(records)


def _each(cases, progress):
    if not progress:
        for c in cases:
            yield c, _base(c)
        return
    if not sys.stdout.isatty():     # a log, not a terminal: a line a case, as it starts
        start = time.perf_counter()
        for i, c in enumerate(cases):
            spent = time.perf_counter() - start
            left = f", ~{spent / i * (len(cases) - i):.0f} s left" if i else ""
            print(f"[{i + 1}/{len(cases)}] {c.kernel} {_fmt(c.params)} {c.dtype} {c.m}x{c.n}x{c.k} "
                  f"({spent:.0f} s{left})", flush=True)
            yield c, _base(c)
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    cols = (TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn())
    with Progress(*cols, transient=False) as bar:
        task = bar.add_task("bench", total=len(cases))
        for c in cases:
            bar.update(task, description=f"{c.kernel} {_fmt(c.params)} {c.dtype} {c.m}x{c.n}x{c.k}")
            yield c, _base(c)
            bar.advance(task)


def _fmt(params):
    return ",".join(f"{k}={v}" for k, v in params.items())


def _base(c: Case) -> dict:
    return {"kernel": c.kernel, "params": dict(c.params), "dtype": c.dtype, "m": c.m, "n": c.n, "k": c.k,
            "seed": c.seed, "host_inputs": c.host_inputs, "layout": c.layout, "tag": c.tag}


def _measure(case: Case, budget_s: float, skip_over_s: float, seen: dict) -> dict:
    try:
        kernel = registry.get(case.kernel)
    except ValueError as e:
        return {"status": "skipped", "reason": str(e)}
    why = kernel.available()
    if why:  # before any data moves: a CPU-only machine skips the GPU rungs and says why
        return {"status": "skipped", "reason": why}
    flops = 2.0 * case.m * case.n * case.k
    prev = seen.get(case.key)
    if prev and prev[1] * flops / prev[0] > skip_over_s * 1e3:   # measured on a budget: the rest estimated
        ms = prev[1] * flops / prev[0]
        return {"status": "estimated", "median_ms": ms, "gflops": flops / ms / 1e6,
                "reason": f"not run: {ms / 1e3:.1f} s a call predicted from the measured n = "
                          f"{round((prev[0] / 2) ** (1 / 3))} (time scaled by the flops), over the {skip_over_s:g} s budget "
                          "(--skip-over)"}
    a, b = operands(hash((case.m, case.n, case.k)) % 2**31, case.m, case.n, case.k, case.dtype, case.layout)
    on_gpu = kernel.device == "cuda" and not case.host_inputs and not _compat.emulated(kernel.backend)
    try:
        if on_gpu:
            da, db = arrays.to_device(a, case.dtype), arrays.to_device(b, case.dtype)
        elif case.dtype == "bfloat16":             # NumPy has no bfloat16: torch tensors carry it
            da, db = arrays.host_bfloat16(a), arrays.host_bfloat16(b)
        else:
            da, db = a, b
        plan = api.plan(da, db, kernel=case.kernel, **case.params)
    except (ValueError, TypeError) as e:
        return {"status": "skipped", "reason": str(e)}
    t0 = time.perf_counter()
    c = plan.execute(poison=True)
    arrays.synchronize(c)                  # a GPU kernel's time too, not only its launch
    first_s = time.perf_counter() - t0
    verdict = compare_on_device(c, a, b, case.dtype)      # on the GPU where the result is
    if not verdict.ok:
        return {"status": "FAILED", "reason": verdict.message}
    out = {"status": "ok", "check": verdict.message, "first_call_s": first_s}
    if plan.params.get("autotune"):      # the first call tuned (or read the tuning cache): say which, and how long
        out.update(tuning_s=tuning.last.get("tuning_s"), tuning_cached=tuning.last.get("cached"),
                   tuned_params=tuning.last.get("params"))
    min_reps, slow = 3, False
    if first_s > budget_s:               # compiling, or truly slow? call once more
        t0 = time.perf_counter()
        arrays.synchronize(plan.execute())
        slow = time.perf_counter() - t0 > budget_s
        min_reps = 1 if slow else 3      # a slow rung: one timed call, no more warm-up
    if case.host_inputs:  # the whole call, copies included, as the seeds' wall clock did
        t = summary(time_host([plan.execute], budget_s, min_reps=min_reps))
    elif kernel.device == "cpu" or not on_gpu:    # a CPU rung, or one emulated on the CPU
        t = summary(time_host([plan.prepare()[0]], budget_s, min_reps=min_reps))
    else:
        copies = max(1, -(-L2_ROTATE_BYTES // max(1, a.nbytes + b.nbytes)))
        launches = [plan.prepare(copy=copies > 1)[0] for _ in range(min(copies, 8))]
        t = summary(time_cuda(launches, budget_s, min_reps=min_reps, warm=slow))
    out.update(t)
    ms = t["median_ms"]
    out["gflops"] = flops / ms / 1e6 if ms > 0 else None
    p = plan.problem
    traffic = kernel.traffic(p, **plan.params)
    out["traffic_bytes"] = traffic.bytes(p.itemsize)
    out["gbps"] = traffic.bytes(p.itemsize) / ms / 1e6 if ms > 0 else None
    g = gpu()
    unit, work = kernel.unit(p, plan.params)
    if kernel.device == "cuda" and g and g.peak(unit):
        out["peak_fraction"] = out["gflops"] / 1e3 / (g.peak(unit) / work)   # of its unit's peak
    fig = published(case.seed, case.kernel, case.params, case.dtype, case.n) if case.seed else None
    if fig:
        out["seed_figure"] = {"value": fig.value, "unit": fig.unit, "where": fig.where}
    if case.key not in seen or seen[case.key][0] < flops:  # predict from the largest measured size
        seen[case.key] = (flops, ms)
    return out


BASELINE = {"cpu": "numpy", "cuda": "cublas"}
MEASURED = ("ok", "estimated")    # records with a time: timed, or estimated from a timed size


def with_ratios(records: list[dict]) -> list[dict]:
    """Each record with its speed relative to its device's anchor at the same dtype, shape and
    device (>1: faster), derived from the records themselves."""
    def key(r, kernel):  # the anchor measured in the same suite run, on the same device, same layout
        return (kernel, r["dtype"], r["m"], r["n"], r["k"], r.get("layout", "nn"), r["device"], r["suite"],
                r["date"][:10])
    times = {key(r, r["kernel"]): r.get("median_ms")
             for r in records if r.get("status") in MEASURED and not r["host_inputs"]}
    for r in records:
        if r.get("status") not in MEASURED:
            continue
        base = BASELINE[registry.get(r["kernel"]).device]
        t = times.get(key(r, base))
        r["baseline"] = base
        r["ratio"] = t / r["median_ms"] if t and r["median_ms"] else None
    return records
