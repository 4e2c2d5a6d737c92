"""Shims for the library versions tilemm meets in the wild.

Import this module before numba.cuda: numba-cuda 0.30 still names
``numpy.row_stack``, which NumPy 2.5 removed (it was an alias of vstack).
"""
import os

import numpy as np

# A library launches small grids for small problems; numba-cuda would warn on each one.
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack


def cuda_simulator() -> bool:
    """True when numba-cuda runs kernels in its CPU simulator."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def triton_interpreter() -> bool:
    """True when Triton runs kernels in its interpreter on the CPU."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def emulated(backend: str) -> bool:
    """Whether kernels of this backend run on the CPU here (CUDA simulator, Triton interpreter)."""
    return (backend == "numba-cuda" and cuda_simulator()) or (backend == "triton" and triton_interpreter())


def mend_triton_interpreter() -> None:
    """Triton's interpreter before 3.7 turns a scalar (a one-element 1-D array there) into an int
    with int(array), which NumPy 2.4 refuses ("only 0-dimensional arrays can be converted"): every
    loop over an argument (``range(tl.cdiv(K, BLOCK_K))``) then fails. Triton 3.7 squeezes the
    array first; this does the same for an older one, once, where the interpreter is used."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None or getattr(patch, "mended", False):
        return

    def squeezed_index(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))
    squeezed_index.mended = True
    interpreter._patch_lang_tensor = squeezed_index
