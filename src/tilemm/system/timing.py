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
              warmup_s: float = 0.05, warm: bool = False) -> list[float]:
    """Milliseconds per launch, measured with CUDA events on the default stream.

    The CPU's cost of a launch (Python, argument marshalling) is kept out: an untimed launch
    runs before the start event, so the GPU is busy while the timed ones are enqueued, and a
    short kernel is timed in a batch of launches between one pair of events. warm: the caller
    has already run these launches (a slow kernel, timed once or twice: no warm-up)."""
    from numba import cuda
    t_end = time.perf_counter() + warmup_s
    count = 0
    per_launch_s = 1.0
    while not warm and (time.perf_counter() < t_end or count < len(launches)):
        t0 = time.perf_counter()
        launches[count % len(launches)]()
        cuda.synchronize()                                  # one at a time: never a deep queue
        per_launch_s = time.perf_counter() - t0
        count += 1
    batch = max(1, min(100, int(1e-3 / max(per_launch_s, 1e-7))))  # about 1 ms of work per sample
    times = []
    start = time.perf_counter()
    begin, end = cuda.event(), cuda.event()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget_s):
        if per_launch_s < 0.01:    # a launch's CPU cost matters next to the kernel's time
            launches[-1]()         # keeps the GPU busy meanwhile
        begin.record()
        for i in range(batch):
            launches[(len(times) + i) % len(launches)]()
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(begin, end) / batch)
    return times


def interleaved_rounds(launchers: dict, rounds: int, per_round_s: float, warmup_s: float = 0.02,
                       by_round: bool = False) -> dict:
    """{label: milliseconds per launch} from interleaved rounds (the order rotated each round):
    every variant gets per_round_s of samples a round, so a GPU whose clock drifts as it heats
    (one at its power cap) treats them all alike. by_round: {label: [each round's samples]}."""
    times = {label: [] for label in launchers}
    labels = list(launchers)
    for r in range(rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            samples = time_cuda([launchers[label]], per_round_s, warmup_s=warmup_s)
            if by_round:
                times[label].append(samples)
            else:
                times[label] += samples
    return times


def paired_ratio(base_rounds: list, rounds: list) -> float:
    """The median over rounds of base's median time over the variant's in that round: a ratio
    that a host slower in one round than in the next (a small call's CPU cost) moves less than
    the ratio of the medians over all rounds."""
    return statistics.median(statistics.median(b) / statistics.median(v) for b, v in zip(base_rounds, rounds))


def graphed(launch, copies: int = 10):
    """A launcher that replays `copies` calls of launch() captured in one CUDA graph (torch):
    its time divided by `copies` is the GPU's time per call without the CPU's cost of making it
    (which, for a small product launched from Python, can exceed the GPU's)."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launch()                                            # compiled and allocated before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(copies):
            launch()
    return graph.replay


def launch_overhead_us(launch, calls: int = 20) -> float:
    """CPU microseconds one launch() costs the caller (the GPU work is asynchronous)."""
    from numba import cuda
    launch()
    cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        launch()
    t = time.perf_counter() - t0
    cuda.synchronize()
    return t / calls * 1e6


def summary(times: list[float]) -> dict:
    return {"median_ms": statistics.median(times), "min_ms": min(times), "reps": len(times)}
