"""The layout numpy.matmul gives a new result: order= ("K" by default, "C", "F", "A").

NumPy allocates a result through its iterator: the matrix axes innermost, and with order="K" the
stack's axes in the order the operands' strides give (stacks laid out Fortran first give a result
stacked that way, NumPy's strides exactly). The kernels write a C-contiguous result; where NumPy's
differs, it is copied into NumPy's.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tilemm.numerics import arrays

# a byte for the stride-only views that show NumPy's iterator the operands' strides (never read)
NOWHERE = np.empty(1, np.uint8)


def stack_axes(operands: tuple) -> int:
    """How many stack (loop) axes the result of these operands has."""
    return max((np.ndim(x) - 2 for x in operands), default=0)


def stack_ordered(c, operands: tuple):
    """c (a new NumPy result, matrix axes last) laid out as numpy.matmul's order="K" lays it out:
    the stack's axes ordered by NumPy's iterator from the operands' strides; c itself where that is
    its layout already (one stack axis or none, a C-ordered stack, an empty result)."""
    stacked = [x for x in operands if x.ndim > 2]
    stack = max((x.ndim for x in stacked), default=2) - 2
    if stack < 2 or c.size == 0 or all(map(stacked_in_c_order, stacked)):   # (the usual stacks: C, as c is)
        return c
    matrix = c.ndim - stack
    views = [as_strided(NOWHERE, x.shape[:-2], x.strides[:-2]) for x in stacked]
    # NumPy's gufunc iterator: each operand's stack axes aligned right, its matrix axes out of the loop
    axes = [[-1] * (stack - (x.ndim - 2)) + list(range(x.ndim - 2)) + [-1] * matrix for x in stacked]
    laid = np.nditer(views + [None], flags=["refs_ok", "zerosize_ok", "multi_index"],
                     op_flags=[["readonly"]] * len(views) + [["writeonly", "allocate", "no_broadcast"]],
                     op_dtypes=[None] * len(views) + [c.dtype], order="K",
                     op_axes=axes + [list(range(c.ndim))], itershape=c.shape).operands[-1]
    if laid.strides == c.strides:
        return c
    laid[...] = c
    return laid


def stacked_in_c_order(x) -> bool:
    """Whether x's stack axes step through memory in C order (their strides, where the iterator
    sees one: not on an axis of one element or of stride 0, never increase): NumPy's iterator then
    swaps no two of them."""
    steps = [abs(step) for step, size in zip(x.strides[:-2], x.shape[:-2]) if size > 1 and step]
    return steps == sorted(steps, reverse=True)


def laid_out(c, order: str, operands: tuple, stacked: tuple = None):
    """The result c (core axes last) in the layout numpy.matmul gives for ``order``: "K" as
    stack_ordered lays it out from ``stacked`` (the operands with their core axes last, where
    axes= moved them; else the operands), C for "C", Fortran for "F", and for "A" where every
    operand is Fortran-contiguous; NumPy's strides exactly (a dimension of size 1 too). torch and
    CuPy results: C for "K"."""
    if np.ndim(c) < 2:
        return c
    fortran = order == "F" or (order == "A" and all(fortran_contiguous(x) for x in operands))
    if arrays.device_kind(c) == "torch":
        if not fortran:
            return c.contiguous()
        reverse = tuple(reversed(range(c.ndim)))
        return c.permute(reverse).contiguous().permute(reverse)
    stacked = operands if stacked is None else stacked
    if order == "K" and isinstance(c, np.ndarray) and stack_axes(stacked) > 1 and c.size:
        return stack_ordered(c, stacked)
    wanted = contiguous_strides(c.shape[::-1], c.itemsize)[::-1] if fortran else contiguous_strides(c.shape, c.itemsize)
    return c if c.strides == wanted or c.size == 0 else c.copy(order="F" if fortran else "C")


def contiguous_strides(shape: tuple, itemsize: int = 1) -> tuple:
    """The strides of a C-contiguous array of this shape, in units of itemsize (NumPy's and torch's:
    a dimension of one element, or none, takes the stride of the one after it times one)."""
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def fortran_contiguous(x) -> bool:
    """Whether x (NumPy, torch or CuPy) is laid out in Fortran order (NumPy's flag; 1-D: always)."""
    if arrays.device_kind(x) == "torch":
        return x.permute(tuple(reversed(range(x.ndim)))).is_contiguous()
    return bool(x.flags.f_contiguous)
