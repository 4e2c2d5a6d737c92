"""Cases refused before their operands are made: too large for this machine's memory, or, for a
CPU rung not yet measured at any size, a call at least longer than the budget (--skip-over) and
than MEASURED_ANYWAY_S.

A rung's smaller sizes predict its larger ones (timeleft.py); its first size has nothing to be
predicted from. On the CPU a lower bound is known all the same: no rung here beats NumPy's BLAS,
whose rate this host measured (roofs.py), so flops over that rate is the least a call can take.
"""
from __future__ import annotations

import os

import numpy as np

from tilemm.tools.bench.roofs import host_roofs
from tilemm.tools.bench.suites import Case
from tilemm.tools.bench.timeleft import duration

REFERENCE_BYTES = 8          # the check's float64 (or int64) copies of A, B and C
MEASURED_ANYWAY_S = 1.0      # a first size this quick is run under any --skip-over: the rest are estimated from it


def bytes_needed(case: Case) -> int:
    """Host bytes of A, B and C in the case's dtype plus the reference's wide copies of them."""
    elements = case.m * case.k + case.k * case.n + case.m * case.n
    itemsize = 2 if case.dtype == "bfloat16" else np.dtype(case.dtype).itemsize
    return elements * (itemsize + REFERENCE_BYTES)


def memory_bytes() -> int | None:
    """This machine's physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def refusal(case: Case, device: str, measured: bool, skip_over_s: float) -> str | None:
    """Why the case is not run, said before any work, or None: it may run."""
    need, have = bytes_needed(case), memory_bytes()
    if have is not None and need > have:
        return (f"not run: its operands, result and the check's float64 copies need ~{need / 2**30:.1f} GiB, "
                f"over this machine's {have / 2**30:.1f} GiB of memory; choose a smaller --sizes")
    if device != "cpu" or measured:
        return None
    rate = max(host_roofs()["float32"], host_roofs()["float64"]) * 1e12      # FLOP/s
    least = 2.0 * case.m * case.n * case.k / rate
    if least <= max(skip_over_s, MEASURED_ANYWAY_S):
        return None
    return (f"not run: at least ~{duration(least)} a call (its flops at NumPy's BLAS rate here, "
            f"{rate / 1e9:.0f} GFLOP/s, the most any CPU rung reaches), over the {skip_over_s:g} s budget "
            "(--skip-over); measure smaller --sizes first, or raise --skip-over")
