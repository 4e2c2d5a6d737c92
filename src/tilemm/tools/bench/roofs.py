"""The roofs a roofline is drawn under: the datasheet's for a known GPU; for the host, measured.

A CPU has no datasheet here, so a CPU run measures its own roofs once: the memory roof is the
bandwidth of a large array copy (read and write, past any cache), the compute roofs are the
rates NumPy's BLAS reaches on a 1024^3 product in float32 and float64. Attained, not peak:
the page says so.
"""
from __future__ import annotations

import functools
import time

import numpy as np

COPY_BYTES = 128 * 2**20      # larger than any CPU's last-level cache
GEMM_N = 1024


def _best_s(call, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


@functools.lru_cache(maxsize=None)
def host_roofs() -> dict:
    """{"bandwidth_gbs": ..., "float32": TFLOP/s, "float64": TFLOP/s, "measured": how} for this host."""
    src = np.ones(COPY_BYTES // 8)
    dst = np.empty_like(src)
    copy_s = _best_s(lambda: np.copyto(dst, src))
    roofs = {"bandwidth_gbs": 2 * COPY_BYTES / copy_s / 1e9}      # each byte read once and written once
    del src, dst
    for dtype in ("float32", "float64"):
        a = np.ones((GEMM_N, GEMM_N), dtype)
        a @ a                                                       # BLAS threads started
        roofs[dtype] = 2.0 * GEMM_N**3 / _best_s(lambda: a @ a) / 1e12
    roofs["measured"] = (f"memory: a {COPY_BYTES >> 20} MiB array copy; compute: NumPy (BLAS) at "
                         f"{GEMM_N}x{GEMM_N}x{GEMM_N}")
    return roofs
