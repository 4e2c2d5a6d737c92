"""Timers. CPU: perf_counter around the call. GPU: CUDA events around the kernel alone,
after a warm-up, rotating input sets so a small problem does not time the cache."""
from __future__ import annotations

import statistics
import time


def time_host(launches: list, budget_s: float, min_reps: int = 3, max_reps: int = 30) -> list[float]:
    """Milliseconds of each timed call; the caller has already warmed up (compiled) the kernel."""
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget_s):
        launch = launches[len(times) % len(launches)]
        t0 = time.perf_counter()
        launch()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def time_cuda(launches: list, budget_s: float, min_reps: int = 5, max_reps: int = 200,
              warmup_s: float = 0.05) -> list[float]:
    """Milliseconds of each launch, measured with CUDA events on the default stream."""
    from numba import cuda
    t_end = time.perf_counter() + warmup_s
    while time.perf_counter() < t_end:
        for launch in launches:
            launch()
    cuda.synchronize()
    times = []
    start = time.perf_counter()
    begin, end = cuda.event(), cuda.event()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget_s):
        launch = launches[len(times) % len(launches)]
        begin.record()
        launch()
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(begin, end))
    return times


def summary(times: list[float]) -> dict:
    return {"median_ms": statistics.median(times), "min_ms": min(times), "reps": len(times)}
