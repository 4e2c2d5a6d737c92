"""The ladder: the one list of kernels in tilemm.

Each kernel module builds a ``Kernel`` (tilemm.kernel_record) and passes it to ``register``; the
CLI, the benchmark, ``explain`` and the README table all read the ladder through ``kernels()``
and ``get()``.
"""
from __future__ import annotations

import importlib

from .kernel_record import LADDER, DTYPE_UNITS, Kernel, Param, Problem, Traffic, WholeNumbers, register

__all__ = ["kernels", "get", "Kernel", "Param", "Problem", "Traffic", "WholeNumbers", "register", "DTYPE_UNITS"]


def kernels(device: str | None = None) -> list[Kernel]:
    """The ladder in order (optionally only one device's kernels)."""
    importlib.import_module("tilemm.ladder.rungs")  # registers every rung (they load numba: on first use)
    ladder = sorted(LADDER.values(), key=lambda k: k.rung)
    return [k for k in ladder if device is None or k.device == device]


def get(name: str) -> Kernel:
    if name in LADDER:               # registered already: no need to walk the ladder
        return LADDER[name]
    ladder = {k.name: k for k in kernels()}
    if name not in ladder:
        raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(ladder)}")
    return ladder[name]
