"""What the notebooks (notebooks/*.ipynb) call: a rung run at a toy size with its memory traffic
counted (in the CUDA simulator, or as plain Python for the CPU rung), and the figures drawn from it.

The simulator must be on (NUMBA_ENABLE_CUDASIM=1) before numba.cuda is first imported; the
notebooks set it in their first cell.
"""
from __future__ import annotations

import importlib
import warnings

import numpy as np

from tilemm.system import compat  # noqa: F401  (before numba.cuda: the shims it needs)
from tilemm.ladder import registry
from tilemm.numerics.data import operands
from tilemm.ladder.record import Problem
from tilemm.learn import counting, source
from tilemm.learn.exercises import find


def kernel_source(name: str) -> str:
    """The rung's kernel as its file has it (the exercise markers show the part the exercise leaves out)."""
    e = find(name)
    return source.extract(e.module, e.function).function


def count(name: str, m: int, n: int, k: int, params: dict | None = None, dtype: str = "float32") -> dict:
    """One launch of rung `name` on (m, k) @ (k, n) random operands, counted: the tally's summary,
    the loads of each element of A and B ("per_element"), and whether C is right."""
    kernel = registry.get(name)
    params = {**{p.name: p.default for p in kernel.params}, **(params or {})}
    a, b = (np.ascontiguousarray(x) for x in operands(0, m, n, k, dtype))
    c = np.zeros((m, n), dtype)
    tally = counting.Tally(per_element={"A": np.zeros(a.shape, int), "B": np.zeros(b.shape, int)},
                           watched_block=None if kernel.device == "cpu" else (0, 0, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kernel.device == "cpu":
            function = getattr(importlib.import_module(find(name).module), find(name).function)
            plain = getattr(function, "py_func", function)
            plain(*(counting.HostArray(x, label, tally) for x, label in ((a, "A"), (b, "B"), (c, "C"))),
                  np.zeros(1, dtype)[0])
        else:
            with counting.instrumented(tally):
                args = [counting.global_array(x, label, tally) for x, label in ((a, "A"), (b, "B"), (c, "C"))]
                run_two_d(name, args, params)
    out = tally.summary()
    out["per_element"] = tally.per_element
    out["model"] = kernel.traffic(Problem(m, n, k, dtype), **{key: params[key] for key in params
                                                               if key in {p.name for p in kernel.params}})
    out["params"] = params
    out["correct"] = bool(np.allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3))
    return out


def run_two_d(name: str, args, params: dict) -> None:
    """The rung's 2-D kernel (never its flat form: a flat array has no rows to count by) on its grid."""
    import numba
    from tilemm.ladder.simt import launch
    factory, compile_params = launch.FACTORIES[name]
    a, b, c = args
    problem = Problem(a.shape[0], b.shape[1], a.shape[1], np.dtype(c.dtype).name)
    grid = registry.get(name).launch_shape(problem, **params)
    kernel = factory(numba.from_dtype(np.dtype(c.dtype)), **{key: params[key] for key in compile_params})
    kernel[grid.grid, grid.block](a, b, c)


def traffic_ratio(name: str, sizes, params: dict | None = None, dtype: str = "float32") -> list[float]:
    """The rung's modelled elements read over the minimum (A and B read once), at n x n x n."""
    kernel = registry.get(name)
    p = {**{q.name: q.default for q in kernel.params}, **(params or {})}
    return [kernel.traffic(Problem(n, n, n, dtype), **p).read / (2.0 * n * n) for n in sizes]


def figure(name: str, counted: dict, compared: dict):
    """Four panels: how often block (0, 0) (on the CPU: the whole loop) loaded each element of A and
    of B at the toy size; the 32-byte sectors a warp's access touches, for this rung and those it is
    compared with (`compared`: rung name -> its count()); the traffic model over n for them all."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    who = "the loop" if registry.get(name).device == "cpu" else "block (0, 0)"
    for ax, label in zip(axes[0], ("A", "B")):
        grid = counted["per_element"][label]
        im = ax.imshow(grid, cmap="magma", vmin=0, interpolation="nearest")
        ax.set_title(f"{who}: loads of each element of {label}")
        ax.set_xlabel("column")
        ax.set_ylabel("row")
        fig.colorbar(im, ax=ax, shrink=0.85)
    rungs = {name: counted, **compared}
    ax = axes[1, 0]
    arrays = ("A", "B", "C")
    width = 0.8 / len(rungs)
    for i, (rung, result) in enumerate(rungs.items()):
        values = [result["sectors_per_access"].get(x, 0.0) for x in arrays]
        ax.bar(np.arange(3) + i * width, values, width, label=rung)
    ax.set_xticks(np.arange(3) + width * (len(rungs) - 1) / 2, [f"{x}" for x in arrays])
    ax.set_ylabel("32-byte sectors a warp's access")
    ax.set_title("coalescing (counted in the simulator)" if who != "the loop" else "(no warps on the CPU)")
    ax.legend()
    sizes = [2 ** i for i in range(6, 13)]
    ax = axes[1, 1]
    for rung, result in rungs.items():
        ax.loglog(sizes, traffic_ratio(rung, sizes, result.get("params")), marker="o",
                  label=rung, linewidth=2.5 if rung == name else 1.2)
    ax.set_xlabel("n (n x n x n)")
    ax.set_ylabel("elements read / minimum (model)")
    ax.set_title("the traffic model over n")
    ax.legend()
    fig.tight_layout()
    return fig
