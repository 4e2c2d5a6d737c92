"""Run a suite: check every kernel's answer, then time it; one JSON record per measurement.

A kernel whose answer fails the check is recorded as FAILED and never timed. The cases run
smallest first; a case whose predicted time a call (from the same rung's measured sizes, see
timeleft.py) exceeds skip_over_s is not run: it is recorded as "estimated", its time the
prediction, and the table and plots mark it so. Each record carries what the case took (the
check apart) and how busy the machine was (load.py).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tilemm.system import compat, machine, tuning
from tilemm import api
from tilemm.numerics import arrays
from tilemm.ladder import registry
from tilemm.numerics.accuracy import compare_on_device
from tilemm.numerics.data import operands
from tilemm.system.machine import gpu
from tilemm.tools.bench import upfront
from tilemm.tools.bench.load import LoadWatch
from tilemm.tools.bench.roofs import host_roofs
from tilemm.tools.bench.seeds import published
from tilemm.tools.bench.suites import Case
from tilemm.tools.bench.timeleft import CaseCosts, describe_left, duration, emulated_backend, runs_here
from tilemm.system.timing import summary, time_cuda, time_host

L2_ROTATE_BYTES = 64 * 2**20  # rotate input sets until they span more than any L2 cache


def run_suite(cases: list[Case], *, suite: str, budget_s: float = 2.0, skip_over_s: float = 60.0,
              results: Path | None = None, progress: bool = True) -> list[dict]:
    """Check and time each case; records in the order run, with ratios. `suite` names the
    records of cases that carry no suite of their own; results: a JSON-lines file appended to
    as each case finishes."""
    stamp = machine.stamp(" ".join(["tilemm"] + sys.argv[1:]))
    if any(runs_here(c.kernel) and registry.get(c.kernel).device == "cpu" for c in cases):
        stamp["host_roofs"] = host_roofs()        # a CPU has no datasheet: its roofs, measured
    records = []
    cases = in_running_order(cases)
    emulators = sorted({EMULATORS[b] for b in map(emulated_backend, (c.kernel for c in cases)) if b})
    if emulators and progress:
        print(f"tilemm bench: the GPU rungs run in {' and '.join(emulators)} on this CPU, thousands of times "
              f"slower than on a GPU: a case predicted to take over {skip_over_s:g} s a call (--skip-over) is "
              "skipped; toy sizes (--sizes 16 32) take seconds", file=sys.stderr, flush=True)
    costs = CaseCosts(budget_s, skip_over_s)
    shown = _Progress(len(cases)) if progress else None
    start = time.perf_counter()
    for i, case in enumerate(cases):
        if shown:
            shown.start(i, case, time.perf_counter() - start, *costs.left(cases[i:]))
        warn_if_long(case, costs)
        rec = _base(case)
        if runs_here(case.kernel):        # what was predicted, to set beside what it took
            rec.update(predicted_s=costs.case_s(case), check_probe_cpu_s=costs.probe_cpu_s(case))
        watch = LoadWatch()
        t0 = time.perf_counter()
        rec.update(measure_case(case, budget_s, skip_over_s, costs))
        rec["took_s"] = time.perf_counter() - t0
        rec.update(watch.read())
        costs.learn(case, rec)
        rec.update(stamp)
        rec["suite"] = case.suite or suite
        records.append(rec)
        if results is not None:  # as it comes: a run cut short keeps what it measured
            results.parent.mkdir(parents=True, exist_ok=True)
            with open(results, "a") as f:
                f.write(json.dumps(rec) + "\n")
    if shown:
        shown.close()
    return with_ratios(records)


def in_running_order(cases: list[Case]) -> list[Case]:
    """Smallest products first, each size's rungs in the order given: every rung's smallest size
    runs early, so the time left is predicted for every rung soon, and a rung's larger sizes are
    predicted from its smaller ones before they run."""
    first = {}
    for i, c in enumerate(cases):
        first.setdefault(c.key, i)
    return sorted(cases, key=lambda c: (c.m * c.n * c.k, first[c.key]))


WARN_OVER_S = 60.0      # a case predicted to take longer is announced before it starts
EMULATORS = {"numba-cuda": "the CUDA simulator", "triton": "Triton's interpreter"}


def warn_if_long(case: Case, costs: CaseCosts) -> None:
    """Say so, before it starts, when a case is predicted to take over WARN_OVER_S."""
    if not runs_here(case.kernel):
        return
    took = costs.case_s(case)
    if took is None or took <= WARN_OVER_S:
        return
    call = costs.call_s(case)
    print(f"tilemm bench: {_what(case)} is predicted to take ~{duration(took)} (a call ~{duration(call)}, "
          f"the check ~{duration(costs.check_s(case))}); Ctrl-C stops the run and keeps the last report; "
          f"--skip-over {call / 2:.2g} would estimate it instead", file=sys.stderr, flush=True)


class _Progress:
    """A line a case as it starts (a log), or a bar (a terminal); both with the time left."""

    def __init__(self, total: int):
        self.total, self.bar = total, None
        if sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("{task.fields[left]}"), transient=False)
            self.bar.start()
            self.task = self.bar.add_task("bench", total=total, left="")

    def start(self, i: int, case: Case, spent_s: float, left_s: float, unknown: int) -> None:
        left = describe_left(left_s, unknown)
        if self.bar is None:
            print(f"[{i + 1}/{self.total}] {_what(case)} ({spent_s:.0f} s, {left})", flush=True)
        else:
            self.bar.update(self.task, completed=i, description=_what(case), left=left)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=self.total, left="")
            self.bar.stop()


def _what(case: Case) -> str:
    return f"{case.kernel} {_fmt(case.params)} {case.dtype} {case.m}x{case.n}x{case.k}".replace("  ", " ")


def _fmt(params):
    return ",".join(f"{k}={v}" for k, v in params.items())


def _base(c: Case) -> dict:
    return {"kernel": c.kernel, "params": dict(c.params), "dtype": c.dtype, "m": c.m, "n": c.n, "k": c.k,
            "seed": c.seed, "host_inputs": c.host_inputs, "layout": c.layout, "tag": c.tag}


def measure_case(case: Case, budget_s: float, skip_over_s: float, costs: CaseCosts) -> dict:
    try:
        kernel = registry.get(case.kernel)
    except ValueError as e:
        return {"status": "skipped", "reason": str(e)}
    why = kernel.available()
    if why:  # before any data moves: a CPU-only machine skips the GPU rungs and says why
        return {"status": "skipped", "reason": why}
    flops = 2.0 * case.m * case.n * case.k
    emulator = EMULATORS.get(emulated_backend(case.kernel))
    predicted = costs.call_s(case)
    sizes = costs.measured_sizes(case)
    if predicted is not None and predicted > skip_over_s and not sizes:   # an emulated rung never measured
        return {"status": "skipped", "emulated": emulator,
                "reason": f"not run: at least ~{duration(predicted)} a call predicted in {emulator} (a GPU rung run "
                          f"on the CPU), over the {skip_over_s:g} s budget (--skip-over); measure it there at "
                          "--sizes 32 64, or on a GPU"}
    if predicted is not None and predicted > skip_over_s:    # measured on a budget: the rest estimated
        ms = predicted * 1e3
        return {"status": "estimated", "median_ms": ms, "gflops": flops / ms / 1e6,
                "reason": f"not run: ~{duration(predicted)} a call predicted from the measured n = "
                          f"{', '.join(map(str, sizes[-2:]))} (time scaled by the flops), over the {skip_over_s:g} s "
                          f"budget (--skip-over); a cache cliff past n = {sizes[-1]} would make it slower"}
    refused = upfront.refusal(case, kernel.device, bool(sizes), skip_over_s)
    if refused:              # before the operands: they might not fit, or take hours
        return {"status": "skipped", "reason": refused}
    a, b = operands(hash((case.m, case.n, case.k)) % 2**31, case.m, case.n, case.k, case.dtype, case.layout)
    on_gpu = kernel.device == "cuda" and not case.host_inputs and not compat.emulated(kernel.backend)
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
    t0, cpu0 = time.perf_counter(), time.process_time()
    verdict = compare_on_device(c, a, b, case.dtype)      # on the GPU where the result is
    check_s, check_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    if not verdict.ok:
        return {"status": "FAILED", "reason": verdict.message, "emulated": emulator}
    out = {"status": "ok", "check": verdict.message, "first_call_s": first_s, "check_s": check_s,
           "check_cpu_s": check_cpu_s, "emulated": emulator}
    timing_start = time.perf_counter()
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
    out["timing_s"] = time.perf_counter() - timing_start
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
    return out


BASELINE = {"cpu": "numpy", "cuda": "cublas"}
MEASURED = ("ok", "estimated")    # records with a time: timed, or estimated from a timed size


def with_ratios(records: list[dict]) -> list[dict]:
    """Each record with its speed relative to its device's anchor at the same dtype, shape and
    device (>1: faster), derived from the records themselves."""
    def key(r, kernel):  # the anchor measured in the same suite run, on the same device, same layout
        return (kernel, r["dtype"], r["m"], r["n"], r["k"], r.get("layout", "nn"), r["device"], r.get("suite"),
                r.get("date", "")[:10])
    times = {key(r, r["kernel"]): r.get("median_ms")
             for r in records if r.get("status") in MEASURED and not r.get("host_inputs")}
    for r in records:
        if r.get("status") not in MEASURED:
            continue
        try:
            base = BASELINE[registry.get(r["kernel"]).device]
        except ValueError:             # a rung not in the registry: no anchor to compare with
            continue
        t = times.get(key(r, base))
        r["baseline"] = base
        r["ratio"] = t / r["median_ms"] if t and r["median_ms"] else None
    return records
