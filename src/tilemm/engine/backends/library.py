"""The library backend (cuBLAS through torch or CuPy): torch tensors as Triton takes them, or,
with no torch here, numba-cuda's views as the SIMT rungs."""
from __future__ import annotations

from tilemm.numerics import arrays
from tilemm.engine.backends import numba_cuda, triton


def prepare(plan, a, b, poison: bool, copy: bool):
    """The library takes torch tensors as they are (numba-cuda has no bfloat16), as Triton does,
    but always on the GPU; with no torch here (CuPy alone), numba-cuda's views as the SIMT rungs."""
    if arrays.torch_if_imported() is None:
        try:
            import torch  # noqa: F401  (installed, not imported yet)
        except ImportError:
            return numba_cuda.prepare(plan, a, b, poison, copy)
    return triton.prepare(plan, a, b, poison, copy, where="cuda")
