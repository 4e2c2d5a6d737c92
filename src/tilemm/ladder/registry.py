"""The ladder: the one list of kernels in tilemm.

Each kernel module builds a ``Kernel`` (tilemm.ladder.record) and passes it to ``register``; the
CLI, the benchmark, ``explain`` and the README table all read the ladder through ``kernels()``
and ``get()``.
"""
from __future__ import annotations

import importlib

from tilemm.ladder.record import LADDER, DTYPE_UNITS, Kernel, Param, Problem, Traffic, WholeNumbers, register

__all__ = ["kernels", "get", "Kernel", "Param", "Problem", "Traffic", "WholeNumbers", "register", "DTYPE_UNITS"]


def kernels(device: str | None = None) -> list[Kernel]:
    """The ladder in order: rung 0 (`numpy`) up to the tensor-core rungs, then the `cublas` anchor.

    Parameters
    ----------
    device : {"cpu", "cuda"}, optional
        Only the kernels that run there; None (the default): all of them.

    Returns
    -------
    list of Kernel
        Sorted by rung.
    """
    importlib.import_module("tilemm.ladder.rungs")  # registers every rung (they load numba: on first use)
    ladder = sorted(LADDER.values(), key=lambda k: k.rung)
    return [k for k in ladder if device is None or k.device == device]


def get(name: str) -> Kernel:
    """The kernel named ``name`` (``tilemm.kernel("tiled")``).

    Parameters
    ----------
    name : str
        A rung's name, as `kernels` and ``tilemm kernels`` list them.

    Returns
    -------
    Kernel

    Raises
    ------
    ValueError
        No kernel has that name (the message lists those that exist).
    """
    if name in LADDER:               # registered already: no need to walk the ladder
        return LADDER[name]
    ladder = {k.name: k for k in kernels()}
    if name not in ladder:
        raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(ladder)}")
    return ladder[name]
