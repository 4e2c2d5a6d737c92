"""The host backend: NumPy and the numba CPU rungs, a matrix of the stack a call."""
from __future__ import annotations

import functools
import math

import numpy as np

from tilemm.numerics import arrays
from tilemm.numerics.dtypes import dtype_name
from tilemm.engine.backends.common import poisoned, run_over_stack


def prepare(plan, a, b, poison: bool, copy: bool):
    """Copy to the host if needed; the kernel runs once per matrix of the stack (NumPy once)."""
    p = plan.problem
    a_h, b_h = arrays.to_host(a, p.dtype), arrays.to_host(b, p.dtype)
    if copy:
        a_h, b_h = a_h.copy(), b_h.copy()
    c = poisoned(plan.batch + (p.m, p.n), p.dtype, poison)

    def launch():
        if p.m and p.n:  # an empty output needs no launch
            run_over_stack(plan, a_h, b_h, c)
    return launch, lambda: c, None       # (no replay on the host)


# the compute dtypes whose torch tensors Tensor.numpy() views as they are (bfloat16 has no NumPy twin)
NUMPY_HOLDS = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
                         "complex64", "complex128"))


def repeated_product(plan, dtype_a, dtype_b):
    """A kept plan's repeated call on CPU torch tensors (no out, no stream) as one function of the
    operands, or None where the plan's own path must run. It takes the steps that path takes for
    them, without the steps that do nothing there: the operands' NumPy views (to_host: no cast
    where they are of the compute dtype), C allocated, the rung run (run_over_stack: the stack,
    or the one matrix), C's torch view (arrays.from_host: no cast, no copy, no move). So only
    where those steps are no-ops: both operands (of dtypes dtype_a and dtype_b, which the key
    fixes) of the compute dtype and the result's; matrices or stacks of them (no 1-D operand, so
    C needs no reshape); no empty result (which from_host gives other strides)."""
    p = plan.problem
    operands = {dtype_name(dtype_a), dtype_name(dtype_b)}
    if (plan.operand.kind != "torch" or plan.operand.device != "cpu" or operands != {p.dtype} or plan.result != p.dtype
            or p.dtype not in NUMPY_HOLDS or len(plan.shape) != len(plan.batch) + 2 or math.prod(plan.shape) == 0):
        return None
    import torch    # (only torch tensors come here: imported already)
    from_numpy, shape, dtype = torch.from_numpy, plan.shape, np.dtype(p.dtype)
    if plan.batch:
        run = functools.partial(run_over_stack, plan)
    else:
        run = functools.partial(plan.kernel.run, **plan.params) if plan.params else plan.kernel.run

    def product(a, b):
        c = np.empty(shape, dtype)
        # numpy(force=True): a conjugate or negative view's values, a tensor that requires grad detached
        run(a.numpy(force=True), b.numpy(force=True), c)
        return from_numpy(c)
    return product
