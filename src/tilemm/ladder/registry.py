"""The ladder: the one list of kernels in tilemm.

Each kernel module builds a ``Kernel`` (tilemm.ladder.record) and passes it to ``register``; the
CLI, the benchmark, ``explain`` and the README table all read the ladder through ``kernels()``
and ``get()``. ``get(name)`` imports the one module that registers the rung (tilemm.ladder.rungs
says which), ``kernels()`` all of them; none imports numba, numba-cuda or Triton, which a rung's
kernel file loads at its first launch.
"""
from __future__ import annotations

import importlib

from tilemm.ladder.rungs import PROGRAMS, RUNGS
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

    Raises
    ------
    ValueError
        Another device (``"gpu"``, ``"cuda:0"``).
    """
    if device not in (None, "cpu", "cuda"):          # ("gpu" gave an empty ladder)
        raise ValueError(f"kernels: device must be 'cpu', 'cuda' or None (all), not {device!r}")
    for module in dict.fromkeys(RUNGS.values()):     # registers every rung (their kernels load on first use)
        importlib.import_module(module)
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
    TypeError
        A name that is not a str.
    ValueError
        No kernel has that name (the message lists those that exist).
    """
    if not isinstance(name, str):    # (a list would fail the look-up as unhashable, a Kernel as unknown)
        raise TypeError(f"kernel must be a kernel's name (a str), not {type(name).__name__} {name!r}; "
                        f"known kernels: {', '.join(k.name for k in kernels())}")
    if name in LADDER:               # registered already
        return LADDER[name]
    if name not in RUNGS:
        raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(k.name for k in kernels())}")
    importlib.import_module(RUNGS[name])     # registers it (and only the rungs its module needs)
    return LADDER[name]


def program(name: str):
    """The module of a rung or product program, for the product fronts that call its own launcher
    (tilemm.grouped_matmul: ``tensorcore-grouped``; tilemm.scaled_matmul: ``scaled-fp8`` and
    ``block-scaled``): the floors above the ladder reach it here, as they reach a rung by `get`."""
    where = RUNGS.get(name) or PROGRAMS.get(name)
    if where is None:
        raise ValueError(f"unknown program {name!r}; known: {', '.join([*RUNGS, *PROGRAMS])}")
    return importlib.import_module(where)
