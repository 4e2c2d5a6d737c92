"""The grader's timing child: the learner's kernel on the real device, checked, then timed beside the
rung it imitates, the rung before it and the vendor library (cuBLAS on a GPU, NumPy on the CPU).

Run as ``python -m tilemm.learn.speed FILE EXERCISE OUT.json`` with the simulator and the
interpreter off. The GPU rungs need a GPU (without one the result says so); the CPU rung is timed
on the CPU anywhere.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

from tilemm.numerics import accuracy
from tilemm.system import compat, timing
from tilemm.ladder import registry
from tilemm.learn import examine
from tilemm.learn.exercises import BY_NAME, Exercise, find

SIZE = {"numba": 256, "numba-cuda": 2048, "triton": 4096}        # n of the timed n x n x n product
DTYPE = {"numba": "float32", "numba-cuda": "float32", "triton": "float16"}
BUDGET_S = 0.5


def device_arrays(backend: str, a, b, c):
    """The three arrays as a kernel of this backend takes them on this machine."""
    if backend == "numba":
        return a, b, c
    if backend == "numba-cuda":
        from numba import cuda
        return tuple(cuda.to_device(x) for x in (a, b, c))
    import torch
    return tuple(torch.from_numpy(x).cuda() for x in (a, b, c))


def to_host(x) -> np.ndarray:
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    if hasattr(x, "cpu"):
        return x.cpu().numpy()
    return np.asarray(x)


def synchronize(backend: str) -> None:
    if backend != "numba":
        from numba import cuda
        cuda.synchronize()


def timed(backend: str, launch) -> float:
    """Median milliseconds of a launch (CUDA events on a GPU, the host clock on the CPU)."""
    launch()
    synchronize(backend)
    times = timing.time_host([launch], BUDGET_S) if backend == "numba" else timing.time_cuda([launch], BUDGET_S)
    return statistics.median(times)


def defaults(name: str) -> dict:
    return {p.name: p.default for p in registry.get(name).params}


def check_here(module, exercise: Exercise) -> list:
    """The learner's kernel at the grader's shapes, on this device, with the rung's own parameters."""
    failures = []
    for shape, dtype, layout, _ in examine.cases(exercise):     # with the rung's own tiles
        a, b, c = examine.arrays(exercise, *shape, dtype, layout)
        if exercise.backend == "triton":
            dtype = "float16"
        args = device_arrays(exercise.backend, a, b, c)
        module.run(*args, **launch_params(exercise))
        synchronize(exercise.backend)
        verdict = accuracy.compare(to_host(args[2]), a, b, dtype)
        if not verdict.ok:
            failures.append(f"{'x'.join(map(str, shape))} {dtype}: {verdict.message}")
    return failures


def launch_params(exercise: Exercise) -> dict:
    """The rung's own parameters (its default tiles), where the exercise file takes parameters."""
    if exercise.backend == "numba":
        return {}
    return {k: v for k, v in defaults(exercise.name).items() if k in exercise.sim_params
            or exercise.backend == "triton" and k in ("num_warps", "num_stages")}


def measure(path: Path, exercise: Exercise) -> dict:
    if exercise.backend != "numba":
        from numba import cuda
        if compat.cuda_simulator() or not cuda.is_available():
            return {"skipped": "no GPU here: timed only on a GPU"}
    module, failed = examine.load(path)
    if failed:
        return {"skipped": f"the file does not load: {failed['message']}"}
    failures = check_here(module, exercise)
    if failures:
        return {"failures": failures}
    n, dtype = SIZE[exercise.backend], DTYPE[exercise.backend]
    a, b = (np.ascontiguousarray(x) for x in examine.operands(1, n, n, n, dtype))
    rows = []

    def add(label, name, backend, run, work_dtype):
        aa, bb = (a, b) if work_dtype == dtype else (a.astype(work_dtype), b.astype(work_dtype))
        args = device_arrays(backend, aa, bb, np.zeros((n, n), work_dtype))
        try:
            ms = timed(backend, lambda: run(*args))
        except Exception as e:  # noqa: BLE001  (a comparison that can't run here is left out, with why)
            rows.append({"label": label, "kernel": name, "error": f"{type(e).__name__}: {e}"})
            return
        rows.append({"label": label, "kernel": name, "dtype": work_dtype, "ms": ms,
                     "tflops": 2.0 * n ** 3 / (ms * 1e-3) / 1e12})

    add("yours", exercise.name, exercise.backend, lambda *x: module.run(*x, **launch_params(exercise)), dtype)
    rung = registry.get(exercise.name)
    add("the rung", exercise.name, exercise.backend, lambda *x: rung.run(*x, **defaults(exercise.name)), dtype)
    before = registry.get(exercise.before)
    before_exercise = BY_NAME.get(exercise.before)
    before_backend = before_exercise.backend if before_exercise else ("numba" if before.device == "cpu" else "numba-cuda")
    before_dtype = dtype if dtype in before.dtypes else before.dtypes[0] if "float32" not in before.dtypes else "float32"
    add("the rung before", before.name, before_backend, lambda *x: before.run(*x, **defaults(before.name)), before_dtype)
    if exercise.backend == "numba" and exercise.before != "numpy":
        add("NumPy (OpenBLAS)", "numpy", "numba", lambda x, y, z: np.matmul(x, y, out=z), dtype)
    elif exercise.backend != "numba":
        library = registry.get("cublas")
        add("cuBLAS", "cublas", "triton", library.run, dtype)      # torch tensors on the GPU
    return {"size": n, "dtype": dtype, "rows": rows}


def main(argv: list[str]) -> int:
    path, name, result = Path(argv[0]).resolve(), argv[1], Path(argv[2])
    result.write_text(json.dumps(measure(path, find(name))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
