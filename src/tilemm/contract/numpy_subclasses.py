"""ndarray subclasses (np.matrix, np.memmap, a user's) in numpy.matmul, as NumPy's own protocol
treats them: computed on their data, then handed to the ``__array_wrap__`` NumPy picks (the
operand of highest ``__array_priority__``, a plain ndarray counting as 0), with the context NumPy
gives it; an ``out`` of a subclass is written through its data and handed to its own
``__array_wrap__``. A subclass with its own ``__array_ufunc__`` decides matmul itself (NumPy asks
it, not its loops): tilemm refuses it.
"""
from __future__ import annotations

import numpy as np


def subclass_wrap(a, b):
    """For operands of which one or both are ndarray subclasses (np.matrix): a function giving what
    numpy.matmul returns from the plain result, through the ``__array_wrap__`` NumPy picks
    (wrapper_of); the plain result where a plain ndarray outranks the subclasses (np.memmap's
    priority is -100). None where neither is a subclass. TypeError for a subclass that overrides
    ``__array_ufunc__``: numpy.matmul hands the call to it."""
    subclasses = [x for x in (a, b) if isinstance(x, np.ndarray) and type(x) is not np.ndarray]
    if not subclasses:
        return None
    for x in subclasses:
        if type(x).__array_ufunc__ is not np.ndarray.__array_ufunc__:
            raise TypeError(f"matmul: operand of type {type(x).__module__}.{type(x).__name__} overrides "
                            "__array_ufunc__, so numpy.matmul's answer is its own; tilemm multiplies ndarrays "
                            "and subclasses that keep NumPy's (pass np.asarray(x))")
    chosen = wrapper_of(a, b)
    context = (np.matmul, (a, b), 0)

    def wrap(value):
        if chosen is None:                   # a plain ndarray's: the plain result
            return value
        array = np.asarray(value)            # a NumPy scalar (1-D @ 1-D) as its 0-d array
        return chosen.__array_wrap__(array, context, array.ndim == 0)
    return wrap


def wrapper_of(a, b):
    """The operand whose ``__array_wrap__`` numpy.matmul calls (its npy_find_array_wrap): the one of
    highest ``__array_priority__``, the first of equals, where a plain ndarray counts as 0 with no
    wrap of its own (a subclass of priority 0 is preferred to it) and a scalar as -1e6; None where
    the plain ndarray (or a scalar) is the one."""
    chosen, priority, first = None, None, True
    for x in (a, b):
        if type(x) is np.ndarray or isinstance(x, (np.generic, int, float, complex)):
            candidate, rank = None, (0.0 if type(x) is np.ndarray else -1e6)
        elif isinstance(x, np.ndarray):
            candidate, rank = x, float(getattr(x, "__array_priority__", 0.0))
        else:                                # (a list: no wrap of its own)
            continue
        if first or priority < rank or (rank == 0.0 and candidate is not None and chosen is None):
            chosen, priority, first = candidate, rank, False
    return chosen


def wrapped_out(out) -> bool:
    """Whether numpy.matmul returns what ``out``'s ``__array_wrap__`` makes of it: an ndarray subclass."""
    return isinstance(out, np.ndarray) and type(out) is not np.ndarray


def out_wrap(a, b, out):
    """What numpy.matmul returns for an ndarray subclass ``out`` once written: its __array_wrap__'s
    answer, given the context NumPy gives it (the operands and out; never a scalar)."""
    return out.__array_wrap__(out, (np.matmul, (a, b, out), 0), False)


def plain(x):
    """x as a plain ndarray where it is a subclass (its data, no copy), else x."""
    return np.asarray(x) if isinstance(x, np.ndarray) else x
