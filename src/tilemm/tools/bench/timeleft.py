"""How long the cases of a benchmark run will take, predicted from the cases already run.

A case costs its calls (the first, which compiles on a rung's first case, maybe a second, then
the timed ones: the budget, at least 3 calls and at most 30, or one call for a slow rung), the
check (the reference the result is compared with: NumPy's exact loop for integers, float64 BLAS
for floats) and a little set-up. Each part is fitted on what was measured so far:

- a rung's call: time = t1 * (flops / flops1)^p through its two largest measured sizes, p
  between 1 (time grows with the flops) and 1.5 (a cache cliff between them); one size: p = 1;
- the check: where the reference is NumPy's integer loop on the host, timed on a few rows of the
  case's own size (a row costs what a row of the whole product costs, cache misses included,
  which a fit from smaller sizes misses: their rows fit in caches the large product's outgrow);
  else the same fit as the calls, per dtype, over every rung's checks;
- the set-up (operands, plan), its mean over the cases run. A rung's compile falls on its first
  case, which is run before its others are predicted.

A rung with no measured size has no prediction (the runner measures each rung's smallest size
first), except in the CUDA simulator and Triton's interpreter, which run at a rate known well
enough to warn before a run of hours.
"""
from __future__ import annotations

import functools
import math
import time
from collections import defaultdict

from tilemm.system import compat
from tilemm.ladder import registry
from tilemm.numerics.accuracy import reference
from tilemm.numerics.data import operands
from tilemm.numerics.dtypes import is_exact
from tilemm.tools.bench.suites import Case

# Emulated GPU rungs' rates: the CUDA simulator runs each thread as a Python thread, Triton's
# interpreter a block at a time in NumPy, two orders of magnitude faster. Each is the fastest rung
# of its emulator at toy sizes on a small CPU, so a prediction from them is a lower bound.
EMULATED_FLOPS_PER_S = {"numba-cuda": 1e5, "triton": 1e7}
EXPONENT = (1.0, 1.5)        # time ~ flops^p: at least linear; past 1.5 an extrapolation is a guess


def power_fit(points: list[tuple[float, float]]):
    """A function of x through the two largest x of points (x, y): y2 * (x / x2)^p, p from the two
    clipped to EXPONENT (one point: p = 1); None without points."""
    merged = defaultdict(list)
    for x, y in points:
        if x > 0 and y > 0:
            merged[x].append(y)
    if not merged:
        return None
    xs = sorted(merged)[-2:]
    ys = [sum(merged[x]) / len(merged[x]) for x in xs]
    p = 1.0
    if len(xs) == 2:
        p = min(max(math.log(ys[1] / ys[0]) / math.log(xs[1] / xs[0]), EXPONENT[0]), EXPONENT[1])
    x2, y2 = xs[-1], ys[-1]
    return lambda x: y2 * (x / x2) ** p


def flops(case) -> float:
    return 2.0 * case.m * case.n * case.k


def emulated_backend(kernel: str) -> str | None:
    """The backend ("numba-cuda", "triton") that runs this GPU rung on the CPU here, or None."""
    try:
        k = registry.get(kernel)
    except ValueError:
        return None
    return k.backend if k.device == "cuda" and compat.emulated(k.backend) else None


class CaseCosts:
    """Predicted seconds of cases, learned from the records of the cases run so far."""

    def __init__(self, budget_s: float, skip_over_s: float, probe=None):
        """probe(dtype, m, n, k): CPU seconds the host reference of that product takes, or None
        (default: probe_reference_s, which times it on a few rows)."""
        self.budget_s, self.skip_over_s = budget_s, skip_over_s
        self.probe = probe or probe_reference_s
        self.calls = defaultdict(list)      # rung key -> [(flops, seconds a call)]
        self.checks = defaultdict(list)     # dtype -> [(flops, seconds of the check)]
        self.setup = []                     # seconds of each case's operands, plan and bookkeeping
        self.check_cpu = [0.0, 0.0]         # CPU and wall seconds of the integer checks so far

    def learn(self, case: Case, record: dict) -> None:
        """Take in a finished case's record (its took_s, check_s, first_call_s, timing_s, median_ms)."""
        if record.get("status") != "ok" or record.get("took_s") is None:
            return
        call = record["median_ms"] / 1e3
        self.calls[case.key].append((flops(case), call))
        if record.get("check_s") is not None:
            self.checks[case.dtype].append((flops(case), record["check_s"]))
            if is_exact(case.dtype) and checked_on_host(case.kernel) and record.get("check_cpu_s") is not None:
                self.check_cpu[0] += record["check_cpu_s"]
                self.check_cpu[1] += record["check_s"]
        spent = (record.get("first_call_s") or 0.0) + (record.get("check_s") or 0.0) + (record.get("timing_s") or 0.0)
        self.setup.append(max(0.0, record["took_s"] - spent))

    def call_s(self, case: Case) -> float | None:
        """Seconds a call of this case, predicted; None if its rung has no measured size (and is not emulated)."""
        fit = power_fit(self.calls.get(case.key, []))
        if fit is not None:
            return fit(flops(case))
        backend = emulated_backend(case.kernel)
        return flops(case) / EMULATED_FLOPS_PER_S[backend] if backend else None

    def measured_sizes(self, case: Case) -> list[int]:
        """The n (cube root of m n k) of this rung's measured sizes, largest last."""
        return sorted({round((f / 2) ** (1 / 3)) for f, _ in self.calls.get(case.key, [])})

    def check_s(self, case: Case) -> float:
        """Seconds the check of this case will take: as measured at its size, or probed, or fitted."""
        same = [s for f, s in self.checks.get(case.dtype, []) if f == flops(case)]
        if same:
            return sum(same) / len(same)
        probed = self.probed(case)
        fit = power_fit(self.checks.get(case.dtype, []))
        if fit is not None:         # a probe on a few rows can miss what the whole product meets: the larger
            return max(fit(flops(case)), probed or 0.0)
        if probed is not None:
            return probed
        others = [fit for fit in (power_fit(v) for v in self.checks.values()) if fit]    # a dtype not checked yet
        return max((fit(flops(case)) for fit in others), default=0.0)

    def probed(self, case: Case) -> float | None:
        """The seconds of this case's check the probe predicts, where its reference is NumPy's integer
        loop on the host: the probe's CPU seconds over the share of a core the checks have had
        (the loop runs on one core, which other processes may share)."""
        cpu_s = self.probe_cpu_s(case)
        return None if cpu_s is None else cpu_s / self.share()

    def share(self) -> float:
        """The share of a core the integer checks have had so far (their CPU time over their wall
        time; 1 on a quiet machine, less where other processes take turns on the cores)."""
        cpu, wall = self.check_cpu
        return min(max(cpu / wall, 0.05), 1.0) if wall > 0.1 else 1.0

    def probe_cpu_s(self, case: Case) -> float | None:
        """The probe's CPU seconds for this case's check (None where the check is not NumPy's integer loop on the host)."""
        if is_exact(case.dtype) and checked_on_host(case.kernel):
            return self.probe(case.dtype, case.m, case.n, case.k)
        return None

    def timed_s(self, call_s: float) -> float:
        """The calls of one case: the first, a second when the first passes the budget, then the timed ones."""
        if call_s > self.budget_s:                     # slow: a second call, then one timed call
            return 3 * call_s
        timed = min(max(3 * call_s, self.budget_s + call_s), 30 * call_s)
        return call_s + timed

    def case_s(self, case: Case) -> float | None:
        """Seconds the whole case will take (0 for one estimated rather than run); None if unknown."""
        call = self.call_s(case)
        if call is None:
            return None
        if call > self.skip_over_s:                    # estimated, not run
            return 0.0
        setup = sum(self.setup) / len(self.setup) if self.setup else 0.0
        return self.timed_s(call) + self.check_s(case) + setup

    def left(self, cases: list[Case]) -> tuple[float, int]:
        """(seconds the runnable cases will take as far as known, how many rungs among them have no
        prediction yet)."""
        total, unknown = 0.0, set()
        for c in cases:
            if not runs_here(c.kernel):
                continue
            s = self.case_s(c)
            if s is None:
                unknown.add(c.key)
            else:
                total += s
        return total, len(unknown)


PROBE_OPS = 2**26          # multiply-adds a probe of the reference does (~0.1 s in NumPy's integer loop)
PROBE_UP_TO = 2**26        # ... on a B of at most this many elements (8192 x 8192)


@functools.lru_cache(maxsize=None)
def probe_reference_s(dtype: str, m: int, n: int, k: int) -> float | None:
    """CPU seconds the check's reference of an (m, k) @ (k, n) product in an exact dtype takes on
    the host: NumPy's loop (one thread) on a few rows of A against all of B, scaled to m rows; CPU
    time, not wall time, so that other processes' load at the moment of the probe does not count.
    None past PROBE_UP_TO."""
    if k * n > PROBE_UP_TO or not m:
        return None
    rows = min(m, max(16, -(-PROBE_OPS // max(1, n * k))))
    a, b = operands(0, rows, n, k, dtype, "nn")
    t0 = time.process_time()
    reference(a, b, dtype)
    return (time.process_time() - t0) * m / rows


def checked_on_host(kernel: str) -> bool:
    """Whether a case's result is checked on the host: a CPU rung's, or an emulated GPU rung's."""
    try:
        return registry.get(kernel).device == "cpu" or emulated_backend(kernel) is not None
    except ValueError:
        return False


def runs_here(name: str) -> bool:
    try:
        return registry.get(name).available() is None
    except ValueError:
        return False


def describe_left(seconds: float, unknown: int) -> str:
    """'~2 min left', with the rungs not yet measured, for a progress line."""
    rungs = f"{unknown} rung{'s' * (unknown > 1)}"
    if unknown and not seconds:
        return f"time left: known after each rung's first size ({rungs} to go)"
    return f"~{duration(seconds)} left" + (f" + {rungs} not yet measured" if unknown else "")


def duration(seconds: float) -> str:
    """A duration as a person reads it: 40 ms, 2.5 s, 45 s, 3.5 min, 2.1 h."""
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms" if seconds >= 1e-3 else "0 s"
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
