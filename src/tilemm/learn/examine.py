"""The grader's child process: import a learner's exercise file and run it on awkward shapes against
the reference, counting its memory traffic, then count the rung's own solution the same way.

Run as ``python -m tilemm.learn.examine FILE EXERCISE OUT.json`` with the CUDA simulator and
Triton's interpreter on (grading.py starts it, with a timeout). Everything it finds is written to
OUT.json as plain data; judging it is lessons.py's job. A fault of the learner's code (an exception,
a syntax error) is recorded with the learner's own line, never raised.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import linecache
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import numpy as np

from tilemm.system import compat  # noqa: F401  (before numba.cuda: the shims it needs)
from tilemm.numerics import accuracy
from tilemm.numerics.data import operands
from tilemm.ladder.record import Problem
from tilemm.learn import counting, skeleton
from tilemm.learn.exercises import Exercise, find

# (m, n, k): one element; primes past every tile; a tile multiple; K much larger than M and N; M < N < K.
# Small: the simulator runs each CUDA thread as a Python thread, and a block costs milliseconds.
SHAPES = ((1, 1, 1), (7, 13, 11), (8, 8, 8), (3, 2, 41), (5, 9, 17))
COUNT_SHAPE = (7, 13, 11)             # where loads are counted and compared with the rung's
FLOAT_SHAPE = (3, 5, 7)               # one float32 product: the sum's type (acc) used as asked
COALESCING_SHAPE = (8, 16, 16)        # rows of two sectors: a warp of 4 x 8 threads touches 4 or 8
EXTRAS = {"numba_cuda": "cuda", "triton": "triton", "torch": "triton"}   # module -> the extra that brings it
SENTINEL = {"int32": -1234567, "float32": np.nan, "float16": np.nan}
# A Triton kernel is handed its operands' strides: one case with A and B as transposed views (column-
# major), where a pointer stepped by an element count that only row-major holds (BLOCK_SIZE_K for
# stride_ak, BLOCK_SIZE_K * N for stride_bk) reads the wrong elements. K > BLOCK_SIZE_K: it steps.
STRIDED_CASE = ((5, 9, 17), "float16", "tt")
LAYOUTS = {"nn": "row-major", "tt": "A and B column-major (transposed views)"}
UNEVEN_SHAPE = (37, 19, 9)            # with an exercise's uneven_params: ragged in M, N and K, two blocks each way


def load(path: Path, name: str = "tilemm_learner"):
    """The learner's module, or a fault (a dict) if importing it fails."""
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        with contextlib.redirect_stdout(sys.stderr):      # their prints must not mix with ours
            spec.loader.exec_module(module)
    except SyntaxError as e:
        return None, {"kind": "syntax", "message": e.msg, "line": e.lineno, "code": (e.text or "").rstrip()}
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in EXTRAS:       # an optional dependency, not the learner's fault
            return None, {"kind": "missing", "message": f"this exercise needs {e.name.split('.')[0]}: "
                                                        f"pip install 'tilemm[{EXTRAS[e.name.split('.')[0]]}]'"}
        return None, fault(e, path, "import")
    except Exception as e:      # noqa: BLE001  (the learner's code may raise anything: we report it)
        return None, fault(e, path, "import")
    if not callable(getattr(module, "run", None)):
        return None, {"kind": "no-run", "message": "the file has no function run(a, b, c): the launcher "
                                                   "the exercise gives was removed or renamed"}
    return module, None


def fault(e: BaseException, path: Path, where: str) -> dict:
    """An exception of the learner's code, as data: its kind, its message, their deepest line."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path]
    line = frames[-1].lineno if frames else None
    cause = e
    while cause is not None and not isinstance(cause, IndexError):   # Triton's interpreter wraps it
        cause = cause.__cause__ or cause.__context__
    kind = "index" if cause is not None else "error"
    if cause is not None and cause is not e:
        e = cause
    return {"kind": kind, "where": where, "type": type(e).__name__, "message": str(e).strip(),
            "line": line, "code": linecache.getline(str(path), line).split("  #")[0].strip() if line else ""}


def arrays(exercise: Exercise, m: int, n: int, k: int, dtype: str, layout: str = "nn"):
    """Operands (random, full range for integers; row-major, or with layout "tt" transposed views)
    and a C filled with a sentinel, as the backend takes them."""
    a, b = operands(m * 10007 + n * 101 + k, m, n, k, dtype, layout)
    if layout == "nn":
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    c = np.full((m, n), SENTINEL[dtype], dtype)
    return a, b, c


def cases(exercise: Exercise):
    """(shape, dtype, layout, params) of each product the learner's kernel is checked on; params
    (None: the file's PARAMS) override the launch parameters."""
    if exercise.backend == "triton":
        return [(shape, "float16", "nn", None) for shape in SHAPES] + [STRIDED_CASE + (None,)]
    uneven = [(UNEVEN_SHAPE, "int32", "nn", exercise.uneven_params)] if exercise.uneven_params else []
    return [(shape, "int32", "nn", None) for shape in SHAPES] + [(FLOAT_SHAPE, "float32", "nn", None)] + uneven


def run_case(exercise: Exercise, module, path: Path, shape, dtype: str, params: dict | None = None,
             layout: str = "nn") -> tuple:
    """(result as NumPy, the tally, a fault or None) of the learner's run at one shape (params: the
    launch parameters that override the file's PARAMS, for the SIMT rungs)."""
    m, n, k = shape
    a, b, c = arrays(exercise, m, n, k, dtype, layout)
    tally = counting.Tally(learner_file=str(path))
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")          # integer sums wrap, as they must
            if exercise.backend == "numba-cuda":
                with counting.instrumented(tally):
                    ca, cb, cc = (counting.global_array(x, name, tally) for x, name in ((a, "A"), (b, "B"), (c, "C")))
                    module.run(ca, cb, cc, **(params or {}))
            elif exercise.backend == "numba":
                host_run(module, exercise, a, b, c, tally)
            else:
                c = triton_run(module, a, b, c, tally)
    except Exception as e:  # noqa: BLE001
        failed = fault(e, path, f"{m} x {k} @ {k} x {n}, {dtype}" + ("" if layout == "nn" else f", {LAYOUTS[layout]}")
                       + (f", with {params}" if params else ""))
        return c, tally, {**failed, "layout": layout, "params": params}   # (the lesson tells the cases apart by these)
    return c, tally, None


def host_run(module, exercise: Exercise, a, b, c, tally):
    """The CPU rung: first as plain Python (bounds checked, each access counted), then compiled."""
    function = getattr(module, exercise.function)
    plain = getattr(function, "py_func", function)
    zero = np.zeros(1, c.dtype)[0]
    counted = np.array(c)
    plain(*(counting.HostArray(x, name, tally) for x, name in ((a, "A"), (b, "B"), (counted, "C"))), zero)
    module.run(a, b, c)                            # compiled: numba checks no bounds, the plain run did


def triton_run(module, a, b, c, tally):
    import torch
    ta, tb, tc = (torch.from_numpy(x) for x in (a, b, c))
    with counting.triton_counted(tally, {"A": ta, "B": tb, "C": tc}):
        module.run(ta, tb, tc)
    return tc.numpy()


def diagnose(c, a, b, dtype: str) -> dict:
    """What a wrong result looks like: entries never written, or sums of only the first products."""
    out = {}
    unwritten = np.isnan(c) if np.isnan(SENTINEL[dtype]) else c == SENTINEL[dtype]
    if unwritten.any():
        rows, cols = np.nonzero(unwritten)
        out["unwritten"] = int(unwritten.sum())
        out["unwritten_first"] = [int(rows[0]), int(cols[0])]
    if dtype != "int32" and not unwritten.any() and not np.any(c) and np.any(np.matmul(a, b)):
        out["partial_k"] = 0                      # nothing added: the K loop never ran
    if dtype == "int32" and not unwritten.any():
        for kk in range(a.shape[1]):              # C == A[:, :kk] @ B[:kk]: the K loop stopped early
            if np.array_equal(c, np.matmul(a[:, :kk], b[:kk])):
                out["partial_k"] = kk
                break
    return out


def examine(path: Path, exercise: Exercise, running: Path | None = None) -> dict:
    """What the learner's file does on each case; `running` (a file) is told the case under way, so
    that a run stopped by the grader's timeout can say where it hung."""
    def under_way(shape, dtype):
        if running is not None:
            running.write_text(f"M x N x K = {'x'.join(map(str, shape))}, {dtype}")

    out = {"exercise": exercise.name, "file": str(path), "cases": [], "fault": None, "counts": None,
           "races": [], "params": exercise.sim_params,
           "count_shape": list(COUNT_SHAPE)}
    module, failed = load(path)
    if failed:
        out["fault"] = failed
        return out
    for shape, dtype, layout, params in cases(exercise):
        under_way(shape, dtype)
        c, tally, failed = run_case(exercise, module, path, shape, dtype, params, layout)
        if failed:
            out["fault"] = failed
            out["races"] = tally.races
            return out
        a, b, _ = arrays(exercise, *shape, dtype, layout)
        verdict = accuracy.compare(c, a, b, dtype)
        case = {"shape": list(shape), "dtype": dtype, "layout": layout, "params": params, "ok": verdict.ok,
                "message": verdict.message}
        if not verdict.ok:
            case.update(diagnose(c, a, b, dtype))
        out["cases"].append(case)
        out["races"] = out["races"] or tally.races
        out["divergent_barriers"] = out.get("divergent_barriers") or tally.divergent_barriers()
        if shape == COUNT_SHAPE and dtype == cases(exercise)[0][1] and layout == "nn":
            out["counts"] = tally.summary()
    out["reference"] = reference_counts(exercise)
    out["model"] = model(exercise, *COUNT_SHAPE)
    if exercise.coalescing_params:
        under_way(COALESCING_SHAPE, "int32")
        out["coalescing"] = coalescing(exercise, module, path)
    return out


def coalescing(exercise: Exercise, module, path: Path) -> dict | None:
    """The sectors a warp's access touches, the learner's and the rung's, at COALESCING_SHAPE with
    the exercise's larger tiles; None where the learner's run fails there (its answers judge it)."""
    shape, params = COALESCING_SHAPE, exercise.coalescing_params
    _, tally, failed = run_case(exercise, module, path, shape, "int32", params)
    if failed:
        return None
    return {"shape": list(shape), "params": params, "yours": tally.sectors_per_access(),
            "rung": reference_counts(exercise, shape, params)["sectors_per_access"]}


def reference_counts(exercise: Exercise, shape=COUNT_SHAPE, params: dict | None = None) -> dict:
    """The rung's own counts at `shape` (with params over its PARAMS): its solution file, run the
    way the learner's is."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rung_solution.py"
        path.write_text(skeleton.file_text(exercise, path.name, solution=True))
        module, failed = load(path, "tilemm_rung_solution")
        if failed:
            raise RuntimeError(f"the rung's own solution failed to load: {failed}")
        _, tally, failed = run_case(exercise, module, path, shape, cases(exercise)[0][1], params)
        if failed:
            raise RuntimeError(f"the rung's own solution failed: {failed}")
        return tally.summary()


def model(exercise: Exercise, m: int, n: int, k: int) -> dict:
    """The rung's traffic model (elements read and written) at this shape, with the exercise's parameters."""
    from tilemm.ladder import registry
    kernel = registry.get(exercise.name)
    # the exercise's small tiles may lie below those the rung offers: no validation, the model alone
    params = {**{p.name: p.default for p in kernel.params}, **exercise.sim_params}
    params = {key: v for key, v in params.items() if key in {p.name for p in kernel.params}}
    t = kernel.traffic(Problem(m, n, k, cases(exercise)[0][1]), **params)
    return {"read": float(t.read), "written": float(t.written)}


def main(argv: list[str]) -> int:
    path, name, result = Path(argv[0]).resolve(), argv[1], Path(argv[2])
    if compat.triton_interpreter():
        compat.mend_triton_interpreter()
    result.write_text(json.dumps(examine(path, find(name), result.with_suffix(".running"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
