"""kernel="auto": the fastest rung for this problem, measured once here and then read from the
tuning cache (tilemm.system.tuning) by every later call and process.

The candidates are the fast rungs that can run the problem on its device at their defaults in the
result's own dtype: on the GPU the library and the tensor-core rungs (and `regblock`), capped by the
shipped ranking (tilemm.choose.by_shape) where it names a rung; on the host NumPy and `cpu-tiled`.
The teaching rungs (naive, tiled, ...) are never candidates. Each candidate is run once on the
caller's operands (compiling it), its answer checked, then timed for a short budget as whole
calls, planning and launching included: a later matmul(kernel="auto") pays those each time, and
at small sizes they decide (a tensor-core rung's call costs more CPU time than cuBLAS's).
The first call pays the timing, the cache answers the rest.
"""
from __future__ import annotations

import functools

from tilemm.choose import by_shape as choice
from tilemm.ladder import registry
from tilemm.system import tuning
from tilemm.numerics.dtypes import is_integer
from tilemm.ladder.registry import Problem

GPU_CANDIDATES = ("cublas", "tensorcore", "tensorcore-int", "tensorcore-f32", "tensorcore-f64", "regblock")
HOST_CANDIDATES = ("numpy", "cpu-tiled")
TIMING_BUDGET_S = 0.05        # per candidate: enough for a median of a few launches


def candidates(device: str, result: str, problem_of, m: int = 0, n: int = 0, k: int = 0,
               lds: tuple | None = None) -> list[registry.Kernel]:
    """The fast rungs that compute `result` in its own dtype here (a rung that would promote it, as
    float32 rungs for bfloat16, does more work by design), capped by the shipped ranking
    (tilemm.choose.by_shape): where it names a rung for this shape class, that rung and the library alone;
    where it measured a rung on this class and did not name it, not that rung. problem_of(kernel)
    -> its Problem."""
    names = HOST_CANDIDATES if device == "cpu" else GPU_CANDIDATES
    if device != "cpu":
        if preferred := choice.preferred(result, m, n, k, lds=lds):
            names = tuple(name for name in names if name in (preferred, "cublas"))
        names = tuple(name for name in names if name == "cublas" or choice.worth_timing(name, result, m, n, k, lds))
    found = []
    for name in names:
        kernel = registry.get(name)
        compute = kernel.compute_dtype(result)
        native = compute == result or (is_integer(result) and compute and is_integer(compute)) \
            or name in HOST_CANDIDATES + ("cublas",)
        if compute and native and kernel.why_not(problem_of(kernel), kernel.resolve({})) is None:
            found.append(kernel)
    return found


def choose(plan_for, device: str, result: str, m: int, n: int, k: int, layout: str,
           lds: tuple | None = None) -> registry.Kernel:
    """The measured winner; plan_for(kernel name) -> a Plan of this call with that kernel (lds:
    the operands' leading dimensions, tilemm.choose.by_shape.shape_class)."""
    from tilemm.numerics.accuracy import compare_on_device
    key = f"auto|{_device_name(device)}|{result}|{m}x{n}x{k}|{layout}"
    known = tuning.cached(key)
    names = HOST_CANDIDATES if device == "cpu" else GPU_CANDIDATES
    if known is not None and known["params"].get("kernel") in names:   # every call after the first
        return registry.get(known["params"]["kernel"])
    found = candidates(device, result, lambda kern: Problem(m, n, k, kern.compute_dtype(result)), m, n, k, lds)
    if not found:
        raise ValueError(f"matmul: no fast kernel can compute {result} on {device} here")
    if len(found) == 1:
        return found[0]

    def time_ms(option):
        plan = plan_for(option["kernel"])
        launch, output = plan.prepare()
        launch()
        if not plan.batch and len(plan.shape) == 2:   # a single matrix: check it (a wrong answer never wins),
            if not compare_on_device(output(), plan.a, plan.b, plan.problem.dtype).ok:   # on the GPU if there
                return float("inf")

        def call():           # what each later call will run: a fresh plan, launched once
            plan_for(option["kernel"]).execute()
        if device == "cpu":
            from tilemm.system.timing import time_host
            times = time_host([call], TIMING_BUDGET_S)
        else:
            from tilemm.system.timing import time_cuda
            times = time_cuda([call], TIMING_BUDGET_S)
        import statistics     # (where auto times: not at import)
        return statistics.median(times)
    chosen, _ = tuning.best(key, [{"kernel": kern.name} for kern in found], time_ms)
    return registry.get(chosen["kernel"])


def layout(x) -> str:
    """'n' for an operand whose rows are contiguous, 't' otherwise (the tensor-core rungs' speed
    depends on it)."""
    if len(x.shape) < 2:
        return "n"
    stride = x.stride(-1) if callable(getattr(x, "stride", None)) else x.strides[-1] // x.itemsize
    return "n" if stride == 1 else "t"


@functools.lru_cache(maxsize=None)
def _device_name(device: str) -> str:
    if device == "cpu":
        import platform
        return platform.processor() or platform.machine()
    from tilemm.system import machine
    gpu = machine.gpu()
    return gpu.name if gpu else device
